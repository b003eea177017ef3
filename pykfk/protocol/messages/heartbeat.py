"""Heartbeat (key 12): keep a group membership alive.

v1 adds throttle_time_ms; v2 same; v3 adds group_instance_id; v4 first flexible version.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    12,
    "Heartbeat",
    versions="0-4",
    flexible="4+",
    request=[
        Field("group_id", "string"),
        Field("generation_id", "int32"),
        Field("member_id", "string"),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16"),
    ],
)
