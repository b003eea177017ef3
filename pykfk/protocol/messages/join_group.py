"""JoinGroup (key 11): join a consumer group and take part in a rebalance.

v1 adds rebalance_timeout_ms; v2 adds throttle_time_ms; v3 same; v4 lets the broker ask
for a rejoin with an assigned member id (MEMBER_ID_REQUIRED); v5 adds group_instance_id
(static membership); v6 first flexible version; v7 adds protocol_type/protocol_name to
the response; v8 adds the member's reason for (re)joining (KIP-800); v9 adds
skip_assignment: a static leader that rejoins a stable group gets the members but must
not assign (KIP-814).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    11,
    "JoinGroup",
    versions="0-9",
    flexible="6+",
    request=[
        Field("group_id", "string"),
        Field("session_timeout_ms", "int32"),
        Field("rebalance_timeout_ms", "int32", "1+", default=-1),
        Field("member_id", "string"),
        Field("group_instance_id", "string", "5+", nullable="5+", default=None),
        Field("protocol_type", "string"),
        Field(
            "protocols",
            "[]JoinGroupRequestProtocol",
            fields=[
                Field("name", "string"),
                Field("metadata", "bytes"),
            ],
        ),
        Field("reason", "string", "8+", nullable="8+", default=None),
    ],
    response=[
        Field("throttle_time_ms", "int32", "2+"),
        Field("error_code", "int16"),
        Field("generation_id", "int32", default=-1),
        Field("protocol_type", "string", "7+", nullable="7+", default=None),
        Field("protocol_name", "string", nullable="7+"),
        Field("leader", "string"),
        Field("skip_assignment", "bool", "9+", default=False),
        Field("member_id", "string"),
        Field(
            "members",
            "[]JoinGroupResponseMember",
            fields=[
                Field("member_id", "string"),
                Field("group_instance_id", "string", "5+", nullable="5+", default=None),
                Field("metadata", "bytes"),
            ],
        ),
    ],
)
