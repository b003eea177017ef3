"""OffsetForLeaderEpoch (key 23): end offset of a leader epoch (log truncation, KIP-101/320).

v1 adds leader_epoch to the response; v2 adds current_leader_epoch and throttle_time_ms;
v3 adds replica_id; v4 first flexible version.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    23,
    "OffsetForLeaderEpoch",
    versions="0-4",
    flexible="4+",
    request=[
        Field("replica_id", "int32", "3+", default=-2),
        Field(
            "topics",
            "[]OffsetForLeaderTopic",
            fields=[
                Field("topic", "string"),
                Field(
                    "partitions",
                    "[]OffsetForLeaderPartition",
                    fields=[
                        Field("partition", "int32"),
                        Field("current_leader_epoch", "int32", "2+", default=-1),
                        Field("leader_epoch", "int32"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        Field("throttle_time_ms", "int32", "2+"),
        Field(
            "topics",
            "[]OffsetForLeaderTopicResult",
            fields=[
                Field("topic", "string"),
                Field(
                    "partitions",
                    "[]EpochEndOffset",
                    fields=[
                        Field("error_code", "int16"),
                        Field("partition", "int32"),
                        Field("leader_epoch", "int32", "1+", default=-1),
                        Field("end_offset", "int64", default=-1),
                    ],
                ),
            ],
        ),
    ],
)
