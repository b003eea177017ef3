"""CreateTopics (key 19).

v1 adds validate_only and error_message; v2 adds throttle_time_ms; v3 same; v4 allows -1
partitions/replication factor for broker defaults (KIP-464); v5 first flexible version,
returns num_partitions, replication_factor and configs of created topics (KIP-525); v6
same as v5; v7 returns the topic id (KIP-516).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    19,
    "CreateTopics",
    versions="0-7",
    flexible="5+",
    request=[
        Field(
            "topics",
            "[]CreatableTopic",
            fields=[
                Field("name", "string"),
                Field("num_partitions", "int32"),
                Field("replication_factor", "int16"),
                Field(
                    "assignments",
                    "[]CreatableReplicaAssignment",
                    fields=[
                        Field("partition_index", "int32"),
                        Field("broker_ids", "[]int32"),
                    ],
                ),
                Field(
                    "configs",
                    "[]CreatableTopicConfig",
                    fields=[
                        Field("name", "string"),
                        Field("value", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
        Field("timeout_ms", "int32", default=60000),
        Field("validate_only", "bool", "1+", default=False),
    ],
    response=[
        Field("throttle_time_ms", "int32", "2+"),
        Field(
            "topics",
            "[]CreatableTopicResult",
            fields=[
                Field("name", "string"),
                Field("topic_id", "uuid", "7+"),
                Field("error_code", "int16"),
                Field("error_message", "string", "1+", nullable="0+"),
                Field("topic_config_error_code", "int16", "5+", tag=0),
                Field("num_partitions", "int32", "5+", default=-1),
                Field("replication_factor", "int16", "5+", default=-1),
                Field(
                    "configs",
                    "[]CreatableTopicConfigs",
                    "5+",
                    nullable="5+",
                    fields=[
                        Field("name", "string", "5+"),
                        Field("value", "string", "5+", nullable="5+"),
                        Field("read_only", "bool", "5+"),
                        Field("config_source", "int8", "5+", default=-1),
                        Field("is_sensitive", "bool", "5+"),
                    ],
                ),
            ],
        ),
    ],
)
