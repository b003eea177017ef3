"""ListGroups (key 16): the groups a coordinator knows.

v1 adds throttle_time_ms; v2 same; v3 first flexible version.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    16,
    "ListGroups",
    versions="0-3",
    flexible="3+",
    request=[],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16"),
        Field(
            "groups",
            "[]ListedGroup",
            fields=[
                Field("group_id", "string"),
                Field("protocol_type", "string"),
            ],
        ),
    ],
)
