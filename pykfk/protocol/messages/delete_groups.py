"""DeleteGroups (key 42).

v1 same as v0; v2 first flexible version.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    42,
    "DeleteGroups",
    versions="0-2",
    flexible="2+",
    request=[
        Field("groups_names", "[]string"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "results",
            "[]DeletableGroupResult",
            fields=[
                Field("group_id", "string"),
                Field("error_code", "int16"),
            ],
        ),
    ],
)
