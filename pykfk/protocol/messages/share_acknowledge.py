"""ShareAcknowledge (key 79): a share-group member acknowledges records it acquired
without fetching more (KIP-932). v1 is Kafka 4.1's first stable version; epochs as in
ShareFetch (a session must exist: -1 acknowledges and closes it)."""

from ..schema import ApiSpec, Field
from .share_fetch import leader_id_and_epoch, node_endpoints

SPEC = ApiSpec(
    79,
    "ShareAcknowledge",
    versions="1",
    flexible="0+",
    request=[
        Field("group_id", "string", nullable="0+", default=None),
        Field("member_id", "string", nullable="0+", default=None),
        Field("share_session_epoch", "int32"),
        Field("topics", "[]AcknowledgeTopic", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]AcknowledgePartition", fields=[
                Field("partition_index", "int32"),
                Field("acknowledgement_batches", "[]AcknowledgementBatch", fields=[
                    Field("first_offset", "int64"),
                    Field("last_offset", "int64"),
                    Field("acknowledge_types", "[]int8"),
                ]),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("responses", "[]ShareAcknowledgeTopicResponse", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionData", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                leader_id_and_epoch(),
            ]),
        ]),
        node_endpoints(),
    ],
)
