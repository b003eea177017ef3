"""JoinGroup (key 11): join a consumer group and take part in a rebalance.

v1 adds rebalance_timeout_ms; v2 adds throttle_time_ms; v3 same; v4 lets the broker ask
for a rejoin with an assigned member id (MEMBER_ID_REQUIRED); v5 adds group_instance_id
(static membership); v6 first flexible version; v7 adds protocol_type/protocol_name to
the response.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    11,
    "JoinGroup",
    versions="0-7",
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
    ],
    response=[
        Field("throttle_time_ms", "int32", "2+"),
        Field("error_code", "int16"),
        Field("generation_id", "int32", default=-1),
        Field("protocol_type", "string", "7+", nullable="7+", default=None),
        Field("protocol_name", "string", nullable="7+"),
        Field("leader", "string"),
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
