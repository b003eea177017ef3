"""LeaveGroup (key 13): leave a consumer group.

v1 adds throttle_time_ms; v2 same; v3 replaces member_id by a batch of members (with
group_instance_id) and per-member errors; v4 first flexible version; v5 adds each
member's reason for leaving (KIP-800).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    13,
    "LeaveGroup",
    versions="0-5",
    flexible="4+",
    request=[
        Field("group_id", "string"),
        Field("member_id", "string", "0-2"),
        Field(
            "members",
            "[]MemberIdentity",
            "3+",
            fields=[
                Field("member_id", "string", "3+"),
                Field("group_instance_id", "string", "3+", nullable="3+", default=None),
                Field("reason", "string", "5+", nullable="5+", default=None),
            ],
        ),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16"),
        Field(
            "members",
            "[]MemberResponse",
            "3+",
            fields=[
                Field("member_id", "string", "3+"),
                Field("group_instance_id", "string", "3+", nullable="3+"),
                Field("error_code", "int16", "3+"),
            ],
        ),
    ],
)
