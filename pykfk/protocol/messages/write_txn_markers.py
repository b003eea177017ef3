"""WriteTxnMarkers (key 27): a transaction coordinator asks partition leaders to end a
transaction with COMMIT or ABORT markers (broker to broker).

v1 first flexible version (v0 is the same fields, classic encoding).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    27,
    "WriteTxnMarkers",
    versions="0-1",
    flexible="1+",
    request=[
        Field("markers", "[]WritableTxnMarker", fields=[
            Field("producer_id", "int64"),
            Field("producer_epoch", "int16"),
            Field("transaction_result", "bool"),
            Field("topics", "[]WritableTxnMarkerTopic", fields=[
                Field("name", "string"),
                Field("partition_indexes", "[]int32"),
            ]),
            Field("coordinator_epoch", "int32"),
        ]),
    ],
    response=[
        Field("markers", "[]WritableTxnMarkerResult", fields=[
            Field("producer_id", "int64"),
            Field("topics", "[]WritableTxnMarkerTopicResult", fields=[
                Field("name", "string"),
                Field("partitions", "[]WritableTxnMarkerPartitionResult", fields=[
                    Field("partition_index", "int32"),
                    Field("error_code", "int16"),
                ]),
            ]),
        ]),
    ],
)
