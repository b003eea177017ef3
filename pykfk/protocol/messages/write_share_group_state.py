"""WriteShareGroupState (key 85): broker to broker, to the share coordinator (the leader of
the ``__share_group_state`` partition of a share partition): a share-partition leader's
new state of a share partition, written before acknowledgements are answered (KIP-932).

Layout as Kafka's WriteShareGroupStateRequest/Response.json v0 (flexible).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    85,
    "WriteShareGroupState",
    versions="0",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("topics", "[]WriteStateData", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionData", fields=[
                Field("partition", "int32"),
                Field("state_epoch", "int32"),
                Field("leader_epoch", "int32"),
                Field("start_offset", "int64"),
                Field("state_batches", "[]StateBatch", fields=[
                    Field("first_offset", "int64"),
                    Field("last_offset", "int64"),
                    Field("delivery_state", "int8"),
                    Field("delivery_count", "int16"),
                ]),
            ]),
        ]),
    ],
    response=[
        Field("results", "[]WriteStateResult", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionResult", fields=[
                Field("partition", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)
