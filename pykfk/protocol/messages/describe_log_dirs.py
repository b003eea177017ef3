"""DescribeLogDirs (key 35): the log directories of a broker and the partitions in each.

v1 same as v0; v2 first flexible version; v3 adds a top-level error_code; v4 adds each
directory's total and usable bytes (KIP-827).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    35,
    "DescribeLogDirs",
    versions="0-4",
    flexible="2+",
    request=[
        Field("topics", "[]DescribableLogDirTopic", nullable="0+", fields=[
            Field("topic", "string"),
            Field("partitions", "[]int32"),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16", "3+"),
        Field("results", "[]DescribeLogDirsResult", fields=[
            Field("error_code", "int16"),
            Field("log_dir", "string"),
            Field("topics", "[]DescribeLogDirsTopic", fields=[
                Field("name", "string"),
                Field("partitions", "[]DescribeLogDirsPartition", fields=[
                    Field("partition_index", "int32"),
                    Field("partition_size", "int64"),
                    Field("offset_lag", "int64"),
                    Field("is_future_key", "bool"),
                ]),
            ]),
            Field("total_bytes", "int64", "4+", default=-1),
            Field("usable_bytes", "int64", "4+", default=-1),
        ]),
    ],
)
