"""ShareFetch (key 78): a share-group member fetches records it acquires for a while and
acknowledges records it acquired before (KIP-932).

Version 0 was Kafka 4.0's early access; v1, the first stable version, drops
partition_max_bytes and adds max_records and batch_size. Share sessions: epoch 0 opens
one, -1 closes it, n > 0 continues it. ``acknowledge_types`` holds one type for the
whole batch or one per offset (0 gap, 1 accept, 2 release, 3 reject).
"""

from ..schema import ApiSpec, Field


def _acknowledgement_batches() -> Field:
    return Field("acknowledgement_batches", "[]AcknowledgementBatch", fields=[
        Field("first_offset", "int64"),
        Field("last_offset", "int64"),
        Field("acknowledge_types", "[]int8"),
    ])


def leader_id_and_epoch() -> Field:
    return Field("current_leader", "LeaderIdAndEpoch", fields=[
        Field("leader_id", "int32"), Field("leader_epoch", "int32")])


def node_endpoints() -> Field:
    return Field("node_endpoints", "[]NodeEndpoint", fields=[
        Field("node_id", "int32"),
        Field("host", "string"),
        Field("port", "int32"),
        Field("rack", "string", nullable="0+", default=None),
    ])


SPEC = ApiSpec(
    78,
    "ShareFetch",
    versions="1",
    flexible="0+",
    request=[
        Field("group_id", "string", nullable="0+", default=None),
        Field("member_id", "string", nullable="0+", default=None),
        Field("share_session_epoch", "int32"),
        Field("max_wait_ms", "int32"),
        Field("min_bytes", "int32"),
        Field("max_bytes", "int32", default=0x7FFFFFFF),
        Field("max_records", "int32", "1+"),
        Field("batch_size", "int32", "1+"),
        Field("topics", "[]FetchTopic", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]FetchPartition", fields=[
                Field("partition_index", "int32"),
                _acknowledgement_batches(),
            ]),
        ]),
        Field("forgotten_topics_data", "[]ForgottenTopic", fields=[
            Field("topic_id", "uuid"), Field("partitions", "[]int32")]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("acquisition_lock_timeout_ms", "int32", "1+"),
        Field("responses", "[]ShareFetchableTopicResponse", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionData", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                Field("acknowledge_error_code", "int16"),
                Field("acknowledge_error_message", "string", nullable="0+", default=None),
                leader_id_and_epoch(),
                Field("records", "records", nullable="0+"),
                Field("acquired_records", "[]AcquiredRecords", fields=[
                    Field("first_offset", "int64"),
                    Field("last_offset", "int64"),
                    Field("delivery_count", "int16"),
                ]),
            ]),
        ]),
        node_endpoints(),
    ],
)
