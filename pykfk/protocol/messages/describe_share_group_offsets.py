"""DescribeShareGroupOffsets (key 90): the share-partition start offsets of share groups
(KIP-932); topics null asks for every topic the group has state for."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    90,
    "DescribeShareGroupOffsets",
    versions="0",
    flexible="0+",
    request=[
        Field("groups", "[]DescribeShareGroupOffsetsRequestGroup", fields=[
            Field("group_id", "string"),
            Field("topics", "[]DescribeShareGroupOffsetsRequestTopic", nullable="0+", default=None, fields=[
                Field("topic_name", "string"),
                Field("partitions", "[]int32"),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("groups", "[]DescribeShareGroupOffsetsResponseGroup", fields=[
            Field("group_id", "string"),
            Field("topics", "[]DescribeShareGroupOffsetsResponseTopic", fields=[
                Field("topic_name", "string"),
                Field("topic_id", "uuid"),
                Field("partitions", "[]DescribeShareGroupOffsetsResponsePartition", fields=[
                    Field("partition_index", "int32"),
                    Field("start_offset", "int64"),
                    Field("leader_epoch", "int32"),
                    Field("error_code", "int16"),
                    Field("error_message", "string", nullable="0+", default=None),
                ]),
            ]),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)
