"""DeleteTopics (key 20).

v1 adds throttle_time_ms; v2-v3 same; v4 first flexible version.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    20,
    "DeleteTopics",
    versions="0-4",
    flexible="4+",
    request=[
        Field("topic_names", "[]string", "0-5"),
        Field("timeout_ms", "int32"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field(
            "responses",
            "[]DeletableTopicResult",
            fields=[
                Field("name", "string"),
                Field("error_code", "int16"),
            ],
        ),
    ],
)
