"""DeleteRecords (key 21): move partitions' log start offsets forward (KIP-107).
v1 same as v0; v2 first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    21,
    "DeleteRecords",
    versions="0-2",
    flexible="2+",
    request=[
        Field("topics", "[]DeleteRecordsTopic", fields=[
            Field("name", "string"),
            Field("partitions", "[]DeleteRecordsPartition",
                  fields=[Field("partition_index", "int32"), Field("offset", "int64")]),
        ]),
        Field("timeout_ms", "int32"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("topics", "[]DeleteRecordsTopicResult", fields=[
            Field("name", "string"),
            Field("partitions", "[]DeleteRecordsPartitionResult", fields=[
                Field("partition_index", "int32"),
                Field("low_watermark", "int64"),
                Field("error_code", "int16"),
            ]),
        ]),
    ],
)
