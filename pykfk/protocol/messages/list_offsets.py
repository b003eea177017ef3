"""ListOffsets (key 2): offsets by timestamp (-1 latest, -2 earliest).

v0 returns a list of old-style offsets (max_num_offsets); v1 returns one offset and its
timestamp; v2 adds isolation_level and throttle_time_ms; v3 same as v2; v4 adds
current_leader_epoch and leader_epoch; v5 same as v4; v6 first flexible version; v7 allows
timestamp -3, the record with the largest timestamp (KIP-734); v8 allows -4, the earliest
local offset (KIP-405); v9 allows -5, the last tiered offset (KIP-1005); v10 adds the
request's timeout_ms for lookups in remote storage (KIP-1075).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    2,
    "ListOffsets",
    versions="0-10",
    flexible="6+",
    request=[
        Field("replica_id", "int32"),
        Field("isolation_level", "int8", "2+"),
        Field(
            "topics",
            "[]ListOffsetsTopic",
            fields=[
                Field("name", "string"),
                Field(
                    "partitions",
                    "[]ListOffsetsPartition",
                    fields=[
                        Field("partition_index", "int32"),
                        Field("current_leader_epoch", "int32", "4+", default=-1),
                        Field("timestamp", "int64"),
                        Field("max_num_offsets", "int32", "0", default=1),
                    ],
                ),
            ],
        ),
        Field("timeout_ms", "int32", "10+", default=0),
    ],
    response=[
        Field("throttle_time_ms", "int32", "2+"),
        Field(
            "topics",
            "[]ListOffsetsTopicResponse",
            fields=[
                Field("name", "string"),
                Field(
                    "partitions",
                    "[]ListOffsetsPartitionResponse",
                    fields=[
                        Field("partition_index", "int32"),
                        Field("error_code", "int16"),
                        Field("old_style_offsets", "[]int64", "0"),
                        Field("timestamp", "int64", "1+", default=-1),
                        Field("offset", "int64", "1+", default=-1),
                        Field("leader_epoch", "int32", "4+", default=-1),
                    ],
                ),
            ],
        ),
    ],
)
