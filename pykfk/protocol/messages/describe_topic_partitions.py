"""DescribeTopicPartitions (key 75, KIP-966): topics and their partitions a page at a
time (response_partition_limit partitions per answer, continued from a cursor). Only v0,
flexible."""

from ..schema import ApiSpec, Field

_CURSOR = [Field("topic_name", "string"), Field("partition_index", "int32")]

SPEC = ApiSpec(
    75,
    "DescribeTopicPartitions",
    versions="0",
    flexible="0+",
    request=[
        Field("topics", "[]TopicRequest", fields=[Field("name", "string")]),
        Field("response_partition_limit", "int32", default=2000),
        Field("cursor", "Cursor", nullable="0+", default=None, fields=_CURSOR),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("topics", "[]DescribeTopicPartitionsResponseTopic", fields=[
            Field("error_code", "int16"),
            Field("name", "string", nullable="0+"),
            Field("topic_id", "uuid"),
            Field("is_internal", "bool"),
            Field("partitions", "[]DescribeTopicPartitionsResponsePartition", fields=[
                Field("error_code", "int16"),
                Field("partition_index", "int32"),
                Field("leader_id", "int32"),
                Field("leader_epoch", "int32", default=-1),
                Field("replica_nodes", "[]int32"),
                Field("isr_nodes", "[]int32"),
                Field("eligible_leader_replicas", "[]int32", nullable="0+", default=None),
                Field("last_known_elr", "[]int32", nullable="0+", default=None),
                Field("offline_replicas", "[]int32"),
            ]),
            Field("topic_authorized_operations", "int32", default=-2147483648),
        ]),
        Field("next_cursor", "Cursor", nullable="0+", default=None, fields=_CURSOR),
    ],
)
