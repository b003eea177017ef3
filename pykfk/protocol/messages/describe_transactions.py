"""DescribeTransactions (key 65, KIP-664): the state of transactional ids, from their
coordinator. v0 is flexible."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    65,
    "DescribeTransactions",
    versions="0",
    flexible="0+",
    request=[
        Field("transactional_ids", "[]string"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("transaction_states", "[]TransactionState", fields=[
            Field("error_code", "int16"),
            Field("transactional_id", "string"),
            Field("transaction_state", "string"),
            Field("transaction_timeout_ms", "int32"),
            Field("transaction_start_time_ms", "int64"),
            Field("producer_id", "int64"),
            Field("producer_epoch", "int16"),
            Field("topics", "[]TopicData", fields=[
                Field("topic", "string"),
                Field("partitions", "[]int32"),
            ]),
        ]),
    ],
)
