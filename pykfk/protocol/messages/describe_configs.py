"""DescribeConfigs (key 32): topic and broker configuration.

v1 adds include_synonyms, config_source and synonyms (replacing is_default); v2 same; v3
adds include_documentation, config_type and documentation; v4 first flexible version.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    32,
    "DescribeConfigs",
    versions="0-4",
    flexible="4+",
    request=[
        Field(
            "resources",
            "[]DescribeConfigsResource",
            fields=[
                Field("resource_type", "int8"),
                Field("resource_name", "string"),
                Field("configuration_keys", "[]string", nullable="0+"),
            ],
        ),
        Field("include_synonyms", "bool", "1+", default=False),
        Field("include_documentation", "bool", "3+", default=False),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "results",
            "[]DescribeConfigsResult",
            fields=[
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+"),
                Field("resource_type", "int8"),
                Field("resource_name", "string"),
                Field(
                    "configs",
                    "[]DescribeConfigsResourceResult",
                    fields=[
                        Field("name", "string"),
                        Field("value", "string", nullable="0+"),
                        Field("read_only", "bool"),
                        Field("is_default", "bool", "0"),
                        Field("config_source", "int8", "1+", default=-1),
                        Field("is_sensitive", "bool"),
                        Field(
                            "synonyms",
                            "[]DescribeConfigsSynonym",
                            "1+",
                            fields=[
                                Field("name", "string", "1+"),
                                Field("value", "string", "1+", nullable="0+"),
                                Field("source", "int8", "1+"),
                            ],
                        ),
                        Field("config_type", "int8", "3+", default=0),
                        Field("documentation", "string", "3+", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
)
