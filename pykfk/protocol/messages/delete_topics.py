"""DeleteTopics (key 20).

v1 adds throttle_time_ms; v2-v3 same; v4 first flexible version; v5 adds error_message
(KIP-601); v6 names topics by name or by id (KIP-516) and answers with both.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    20,
    "DeleteTopics",
    versions="0-6",
    flexible="4+",
    request=[
        Field("topics", "[]DeleteTopicState", "6+", fields=[
            Field("name", "string", "6+", nullable="6+", default=None),
            Field("topic_id", "uuid", "6+"),
        ]),
        Field("topic_names", "[]string", "0-5"),
        Field("timeout_ms", "int32"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field(
            "responses",
            "[]DeletableTopicResult",
            fields=[
                Field("name", "string", nullable="6+"),
                Field("topic_id", "uuid", "6+"),
                Field("error_code", "int16"),
                Field("error_message", "string", "5+", nullable="5+", default=None),
            ],
        ),
    ],
)
