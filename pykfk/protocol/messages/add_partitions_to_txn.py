"""AddPartitionsToTxn (key 24): a transactional producer names the partitions it is about
to write in its ongoing transaction.

v1 same as v0; v2 adds nothing on the wire (PRODUCER_FENCED may be answered); v3 first
flexible version; v4 batches transactions (broker to coordinator, with verify_only,
KIP-890) and adds a top-level error code; v5 may answer TRANSACTION_ABORTABLE (KIP-890).
"""

from ..schema import ApiSpec, Field


def _topic(versions: str) -> list[Field]:
    return [Field("name", "string", versions), Field("partitions", "[]int32", versions)]


def _topic_result(versions: str) -> list[Field]:
    return [
        Field("name", "string", versions),
        Field("results_by_partition", "[]AddPartitionsToTxnPartitionResult", versions, fields=[
            Field("partition_index", "int32", versions),
            Field("partition_error_code", "int16", versions),
        ]),
    ]


SPEC = ApiSpec(
    24,
    "AddPartitionsToTxn",
    versions="0-5",
    flexible="3+",
    request=[
        Field("transactions", "[]AddPartitionsToTxnTransaction", "4+", fields=[
            Field("transactional_id", "string", "4+"),
            Field("producer_id", "int64", "4+"),
            Field("producer_epoch", "int16", "4+"),
            Field("verify_only", "bool", "4+", default=False),
            Field("topics", "[]AddPartitionsToTxnTopic", "4+", fields=_topic("4+")),
        ]),
        Field("v3_and_below_transactional_id", "string", "0-3"),
        Field("v3_and_below_producer_id", "int64", "0-3"),
        Field("v3_and_below_producer_epoch", "int16", "0-3"),
        Field("v3_and_below_topics", "[]AddPartitionsToTxnTopic", "0-3", fields=_topic("0-3")),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16", "4+"),
        Field("results_by_transaction", "[]AddPartitionsToTxnResult", "4+", fields=[
            Field("transactional_id", "string", "4+"),
            Field("topic_results", "[]AddPartitionsToTxnTopicResult", "4+", fields=_topic_result("4+")),
        ]),
        Field("results_by_topic_v3_and_below", "[]AddPartitionsToTxnTopicResult", "0-3",
              fields=_topic_result("0-3")),
    ],
)
