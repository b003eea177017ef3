"""CreatePartitions (key 37): add partitions to existing topics.

v1 same as v0; v2 first flexible version; v3 same as v2 (may throttle).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    37,
    "CreatePartitions",
    versions="0-3",
    flexible="2+",
    request=[
        Field(
            "topics",
            "[]CreatePartitionsTopic",
            fields=[
                Field("name", "string"),
                Field("count", "int32"),
                Field(
                    "assignments",
                    "[]CreatePartitionsAssignment",
                    nullable="0+",
                    fields=[
                        Field("broker_ids", "[]int32"),
                    ],
                ),
            ],
        ),
        Field("timeout_ms", "int32"),
        Field("validate_only", "bool"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "results",
            "[]CreatePartitionsTopicResult",
            fields=[
                Field("name", "string"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ],
        ),
    ],
)
