"""ListGroups (key 16): the groups a coordinator knows.

v1 adds throttle_time_ms; v2 same; v3 first flexible version; v4 adds states_filter and
group_state (KIP-518); v5 adds types_filter and group_type (KIP-848).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    16,
    "ListGroups",
    versions="0-5",
    flexible="3+",
    request=[
        Field("states_filter", "[]string", "4+"),
        Field("types_filter", "[]string", "5+"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16"),
        Field(
            "groups",
            "[]ListedGroup",
            fields=[
                Field("group_id", "string"),
                Field("protocol_type", "string"),
                Field("group_state", "string", "4+"),
                Field("group_type", "string", "5+"),
            ],
        ),
    ],
)
