"""DescribeProducers (key 61, KIP-664): the active producers of partitions, from their
leaders' producer state. v0 is flexible."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    61,
    "DescribeProducers",
    versions="0",
    flexible="0+",
    request=[
        Field("topics", "[]TopicRequest", fields=[
            Field("name", "string"),
            Field("partition_indexes", "[]int32"),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("topics", "[]TopicResponse", fields=[
            Field("name", "string"),
            Field("partitions", "[]PartitionResponse", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                Field("active_producers", "[]ProducerState", fields=[
                    Field("producer_id", "int64"),
                    Field("producer_epoch", "int32"),
                    Field("last_sequence", "int32", default=-1),
                    Field("last_timestamp", "int64", default=-1),
                    Field("coordinator_epoch", "int32"),
                    Field("current_txn_start_offset", "int64", default=-1),
                ]),
            ]),
        ]),
    ],
)
