"""Produce (key 0): append record batches to partitions.

v1-v2 same as v0; v3 adds transactional_id and requires magic-2 batches; v4-v6 same as
v3 (v4: KAFKA_STORAGE_ERROR possible); v7 allows zstd (KIP-110); v8 adds per-batch
record_errors and error_message to the response (KIP-467); v9 first flexible version;
v10 adds the tagged current_leader of a partition and node_endpoints of the response
(KIP-951: where a NOT_LEADER_OR_FOLLOWER partition's leader is); v11 may answer
TRANSACTION_ABORTABLE (KIP-890); v12 is the same as v11 (a transactional producer of
transactions v2, KIP-890 part 2); v13 names topics by id (KIP-516; UNKNOWN_TOPIC_ID).
acks=0 requests get no response at all.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    0,
    "Produce",
    versions="0-13",
    flexible="9+",
    request=[
        Field("transactional_id", "string", "3+", nullable="3+", default=None),
        Field("acks", "int16"),
        Field("timeout_ms", "int32"),
        Field(
            "topic_data",
            "[]TopicProduceData",
            fields=[
                Field("name", "string", "0-12"),
                Field("topic_id", "uuid", "13+"),
                Field(
                    "partition_data",
                    "[]PartitionProduceData",
                    fields=[
                        Field("index", "int32"),
                        Field("records", "records", nullable="0+"),
                    ],
                ),
            ],
        ),
    ],
    response=[
        Field(
            "responses",
            "[]TopicProduceResponse",
            fields=[
                Field("name", "string", "0-12"),
                Field("topic_id", "uuid", "13+"),
                Field(
                    "partition_responses",
                    "[]PartitionProduceResponse",
                    fields=[
                        Field("index", "int32"),
                        Field("error_code", "int16"),
                        Field("base_offset", "int64"),
                        Field("log_append_time_ms", "int64", "2+", default=-1),
                        Field("log_start_offset", "int64", "5+", default=-1),
                        Field(
                            "record_errors",
                            "[]BatchIndexAndErrorMessage",
                            "8+",
                            fields=[
                                Field("batch_index", "int32", "8+"),
                                Field(
                                    "batch_index_error_message",
                                    "string",
                                    "8+",
                                    nullable="8+",
                                    default=None,
                                ),
                            ],
                        ),
                        Field("error_message", "string", "8+", nullable="8+", default=None),
                        Field(
                            "current_leader",
                            "LeaderIdAndEpoch",
                            "10+",
                            tag=0,
                            fields=[
                                Field("leader_id", "int32", "10+", default=-1),
                                Field("leader_epoch", "int32", "10+", default=-1),
                            ],
                        ),
                    ],
                ),
            ],
        ),
        Field("throttle_time_ms", "int32", "1+", default=0),
        Field(
            "node_endpoints",
            "[]NodeEndpoint",
            "10+",
            tag=0,
            fields=[
                Field("node_id", "int32", "10+"),
                Field("host", "string", "10+"),
                Field("port", "int32", "10+"),
                Field("rack", "string", "10+", nullable="10+", default=None),
            ],
        ),
    ],
)
