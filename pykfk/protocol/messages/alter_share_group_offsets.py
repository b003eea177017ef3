"""AlterShareGroupOffsets (key 91): set the share-partition start offsets of an empty
share group (KIP-932)."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    91,
    "AlterShareGroupOffsets",
    versions="0",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("topics", "[]AlterShareGroupOffsetsRequestTopic", fields=[
            Field("topic_name", "string"),
            Field("partitions", "[]AlterShareGroupOffsetsRequestPartition", fields=[
                Field("partition_index", "int32"),
                Field("start_offset", "int64"),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("responses", "[]AlterShareGroupOffsetsResponseTopic", fields=[
            Field("topic_name", "string"),
            Field("topic_id", "uuid"),
            Field("partitions", "[]AlterShareGroupOffsetsResponsePartition", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)
