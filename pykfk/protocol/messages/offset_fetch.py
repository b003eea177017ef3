"""OffsetFetch (key 9): read committed consumer group offsets.

v1 reads from the offsets topic instead of ZooKeeper (same layout); v2 allows null
topics (all committed partitions) and adds a top-level error_code; v3 adds
throttle_time_ms; v4-v5 same (v5 adds committed_leader_epoch); v6 first flexible version;
v7 adds require_stable.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    9,
    "OffsetFetch",
    versions="0-7",
    flexible="6+",
    request=[
        Field("group_id", "string", "0-7"),
        Field(
            "topics",
            "[]OffsetFetchRequestTopic",
            "0-7",
            nullable="2-7",
            fields=[
                Field("name", "string", "0-7"),
                Field("partition_indexes", "[]int32", "0-7"),
            ],
        ),
        Field("require_stable", "bool", "7+", default=False),
    ],
    response=[
        Field("throttle_time_ms", "int32", "3+"),
        Field(
            "topics",
            "[]OffsetFetchResponseTopic",
            "0-7",
            fields=[
                Field("name", "string", "0-7"),
                Field(
                    "partitions",
                    "[]OffsetFetchResponsePartition",
                    "0-7",
                    fields=[
                        Field("partition_index", "int32", "0-7"),
                        Field("committed_offset", "int64", "0-7"),
                        Field("committed_leader_epoch", "int32", "5-7", default=-1),
                        Field("metadata", "string", "0-7", nullable="0-7"),
                        Field("error_code", "int16", "0-7"),
                    ],
                ),
            ],
        ),
        Field("error_code", "int16", "2-7", default=0),
    ],
)
