"""IncrementalAlterConfigs (key 44): SET, DELETE, APPEND or SUBTRACT single configs of a
resource (KIP-339). v1 first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    44,
    "IncrementalAlterConfigs",
    versions="0-1",
    flexible="1+",
    request=[
        Field(
            "resources",
            "[]AlterConfigsResource",
            fields=[
                Field("resource_type", "int8"),
                Field("resource_name", "string"),
                Field("configs", "[]AlterableConfig", fields=[
                    Field("name", "string"),
                    Field("config_operation", "int8"),
                    Field("value", "string", nullable="0+"),
                ]),
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
