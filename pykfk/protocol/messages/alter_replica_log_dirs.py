"""AlterReplicaLogDirs (key 34): move replicas between the log directories of the broker
it is sent to (KIP-113). v1 same as v0; v2 first flexible version. Kafka 4 serves 1-2."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    34,
    "AlterReplicaLogDirs",
    versions="1-2",
    flexible="2+",
    request=[
        Field("dirs", "[]AlterReplicaLogDir", fields=[
            Field("path", "string"),
            Field("topics", "[]AlterReplicaLogDirTopic", fields=[
                Field("name", "string"),
                Field("partitions", "[]int32"),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("results", "[]AlterReplicaLogDirTopicResult", fields=[
            Field("topic_name", "string"),
            Field("partitions", "[]AlterReplicaLogDirPartitionResult", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
            ]),
        ]),
    ],
)
