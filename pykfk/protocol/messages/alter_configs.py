"""AlterConfigs (key 33): replace a resource's dynamic configs with the given set.
v1 same as v0; v2 first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    33,
    "AlterConfigs",
    versions="0-2",
    flexible="2+",
    request=[
        Field(
            "resources",
            "[]AlterConfigsResource",
            fields=[
                Field("resource_type", "int8"),
                Field("resource_name", "string"),
                Field("configs", "[]AlterableConfig",
                      fields=[Field("name", "string"), Field("value", "string", nullable="0+")]),
            ],
        ),
        Field("validate_only", "bool"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "responses",
            "[]AlterConfigsResourceResponse",
            fields=[
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                Field("resource_type", "int8"),
                Field("resource_name", "string"),
            ],
        ),
    ],
)
