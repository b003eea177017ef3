"""Fetch (key 1): read record data from partitions.

v1 same as v0; v3 adds max_bytes; v4 adds isolation_level and aborted transactions
(magic 2); v5 adds log_start_offset; v7 adds incremental fetch sessions (KIP-227); v9 adds
current_leader_epoch (KIP-320); v10 allows zstd; v11 adds rack_id and
preferred_read_replica (KIP-392); v12 first flexible version, adds last_fetched_epoch and
tagged diverging_epoch/current_leader/snapshot_id; v13 names topics by id (KIP-516); v14
same as v13; v15 moves replica_id into the tagged replica_state; v16 adds the tagged
node_endpoints of the leaders it names (KIP-951); v17 adds the tagged
replica_directory_id of a fetching follower (KIP-853); v18 adds the tagged high_watermark
the follower knows (KIP-1166): the leader answers at once when it is behind its own.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    1,
    "Fetch",
    versions="0-18",
    flexible="12+",
    request=[
        Field("cluster_id", "string", "12+", nullable="12+", default=None, tag=0),
        Field("replica_id", "int32", "0-14", default=-1),
        Field("replica_state", "ReplicaState", "15+", tag=1, fields=[
            Field("replica_id", "int32", "15+", default=-1),
            Field("replica_epoch", "int64", "15+", default=-1),
        ]),
        Field("max_wait_ms", "int32"),
        Field("min_bytes", "int32"),
        Field("max_bytes", "int32", "3+", default=2147483647),
        Field("isolation_level", "int8", "4+", default=0),
        Field("session_id", "int32", "7+", default=0),
        Field("session_epoch", "int32", "7+", default=-1),
        Field(
            "topics",
            "[]FetchTopic",
            fields=[
                Field("topic", "string", "0-12"),
                Field("topic_id", "uuid", "13+"),
                Field(
                    "partitions",
                    "[]FetchPartition",
                    fields=[
                        Field("partition", "int32"),
                        Field("current_leader_epoch", "int32", "9+", default=-1),
                        Field("fetch_offset", "int64"),
                        Field("last_fetched_epoch", "int32", "12+", default=-1),
                        Field("log_start_offset", "int64", "5+", default=-1),
                        Field("partition_max_bytes", "int32"),
                        Field("replica_directory_id", "uuid", "17+", tag=0),
                        Field("high_watermark", "int64", "18+", default=2**63 - 1, tag=1),
                    ],
                ),
            ],
        ),
        Field(
            "forgotten_topics_data",
            "[]ForgottenTopic",
            "7+",
            fields=[
                Field("topic", "string", "7-12"),
                Field("topic_id", "uuid", "13+"),
                Field("partitions", "[]int32", "7+"),
            ],
        ),
        Field("rack_id", "string", "11+", default=""),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "7+"),
        Field("session_id", "int32", "7+", default=0),
        Field(
            "responses",
            "[]FetchableTopicResponse",
            fields=[
                Field("topic", "string", "0-12"),
                Field("topic_id", "uuid", "13+"),
                Field(
                    "partitions",
                    "[]PartitionData",
                    fields=[
                        Field("partition_index", "int32"),
                        Field("error_code", "int16"),
                        Field("high_watermark", "int64"),
                        Field("last_stable_offset", "int64", "4+", default=-1),
                        Field("log_start_offset", "int64", "5+", default=-1),
                        Field(
                            "diverging_epoch",
                            "EpochEndOffset",
                            "12+",
                            tag=0,
                            fields=[
                                Field("epoch", "int32", "12+", default=-1),
                                Field("end_offset", "int64", "12+", default=-1),
                            ],
                        ),
                        Field(
                            "current_leader",
                            "LeaderIdAndEpoch",
                            "12+",
                            tag=1,
                            fields=[
                                Field("leader_id", "int32", "12+", default=-1),
                                Field("leader_epoch", "int32", "12+", default=-1),
                            ],
                        ),
                        Field(
                            "snapshot_id",
                            "SnapshotId",
                            "12+",
                            tag=2,
                            fields=[
                                Field("end_offset", "int64", default=-1),
                                Field("epoch", "int32", default=-1),
                            ],
                        ),
                        Field(
                            "aborted_transactions",
                            "[]AbortedTransaction",
                            "4+",
                            nullable="4+",
                            fields=[
                                Field("producer_id", "int64", "4+"),
                                Field("first_offset", "int64", "4+"),
                            ],
                        ),
                        Field("preferred_read_replica", "int32", "11+", default=-1),
                        Field("records", "records", nullable="0+"),
                    ],
                ),
            ],
        ),
        Field("node_endpoints", "[]NodeEndpoint", "16+", tag=0, fields=[
            Field("node_id", "int32", "16+"),
            Field("host", "string", "16+"),
            Field("port", "int32", "16+"),
            Field("rack", "string", "16+", nullable="16+", default=None),
        ]),
    ],
)
