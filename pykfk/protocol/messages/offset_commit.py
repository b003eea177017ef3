"""OffsetCommit (key 8): store consumer group offsets.

v1 adds generation/member id and a per-partition commit_timestamp; v2 drops
commit_timestamp and adds retention_time_ms; v3 adds throttle_time_ms; v4 same as v3; v5
drops retention_time_ms; v6 adds committed_leader_epoch; v7 adds group_instance_id; v8
first flexible version; v9 is v8 where members of consumer-protocol groups (KIP-848) send
their member epoch in generation_id_or_member_epoch (STALE_MEMBER_EPOCH when it is not
current).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    8,
    "OffsetCommit",
    versions="0-9",
    flexible="8+",
    request=[
        Field("group_id", "string"),
        Field("generation_id_or_member_epoch", "int32", "1+", default=-1),
        Field("member_id", "string", "1+"),
        Field("group_instance_id", "string", "7+", nullable="7+", default=None),
        Field("retention_time_ms", "int64", "2-4", default=-1),
        Field(
            "topics",
            "[]OffsetCommitRequestTopic",
            fields=[
                Field("name", "string"),
                Field(
                    "partitions",
                    "[]OffsetCommitRequestPartition",
                    fields=[
                        Field("partition_index", "int32"),
                        Field("committed_offset", "int64"),
                        Field("committed_leader_epoch", "int32", "6+", default=-1),
                        Field("commit_timestamp", "int64", "1", default=-1),
                        Field("committed_metadata", "string", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        Field("throttle_time_ms", "int32", "3+"),
        Field(
            "topics",
            "[]OffsetCommitResponseTopic",
            fields=[
                Field("name", "string"),
                Field(
                    "partitions",
                    "[]OffsetCommitResponsePartition",
                    fields=[
                        Field("partition_index", "int32"),
                        Field("error_code", "int16"),
                    ],
                ),
            ],
        ),
    ],
)
