"""Produce (key 0): append record batches to partitions.

v1-v2 same as v0; v3 adds transactional_id and requires magic-2 batches; v4-v6 same as
v3 (v4: KAFKA_STORAGE_ERROR possible); v7 allows zstd (KIP-110); v8 adds per-batch
record_errors and error_message to the response (KIP-467); v9 first flexible version.
acks=0 requests get no response at all.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    0,
    "Produce",
    versions="0-9",
    flexible="9+",
    request=[
        Field("transactional_id", "string", "3+", nullable="3+", default=None),
        Field("acks", "int16"),
        Field("timeout_ms", "int32"),
        Field(
            "topic_data",
            "[]TopicProduceData",
            fields=[
                Field("name", "string"),
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
                Field("name", "string"),
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
                    ],
                ),
            ],
        ),
        Field("throttle_time_ms", "int32", "1+", default=0),
    ],
)
