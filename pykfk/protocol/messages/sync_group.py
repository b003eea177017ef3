"""SyncGroup (key 14): the leader hands out assignments; every member receives its own.

v1 adds throttle_time_ms; v2 same; v3 adds group_instance_id; v4 first flexible version;
v5 adds protocol_type/protocol_name (KIP-559).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    14,
    "SyncGroup",
    versions="0-5",
    flexible="4+",
    request=[
        Field("group_id", "string"),
        Field("generation_id", "int32"),
        Field("member_id", "string"),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
        Field("protocol_type", "string", "5+", nullable="5+", default=None),
        Field("protocol_name", "string", "5+", nullable="5+", default=None),
        Field(
            "assignments",
            "[]SyncGroupRequestAssignment",
            fields=[
                Field("member_id", "string"),
                Field("assignment", "bytes"),
            ],
        ),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16"),
        Field("protocol_type", "string", "5+", nullable="5+", default=None),
        Field("protocol_name", "string", "5+", nullable="5+", default=None),
        Field("assignment", "bytes"),
    ],
)
