"""ElectLeaders (key 43): elect the preferred replica, or any live replica of a partition
that has no live in-sync one, as leader (KIP-183; KIP-460 added election types in v1).
A null ``topic_partitions`` asks for every partition. v1 adds the top-level error code;
v2 is the first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    43,
    "ElectLeaders",
    versions="0-2",
    flexible="2+",
    request=[
        Field("election_type", "int8", "1+"),
        Field("topic_partitions", "[]TopicPartitions", nullable="0+", fields=[
            Field("topic", "string"),
            Field("partitions", "[]int32"),
        ]),
        Field("timeout_ms", "int32", default=60000),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16", "1+"),
        Field("replica_election_results", "[]ReplicaElectionResult", fields=[
            Field("topic", "string"),
            Field("partition_result", "[]PartitionResult", fields=[
                Field("partition_id", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+"),
            ]),
        ]),
    ],
)
