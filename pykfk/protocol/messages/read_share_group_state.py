"""ReadShareGroupState (key 84): broker to broker, to the share coordinator (the leader of
the ``__share_group_state`` partition of a share partition): the share-partition state a
share-partition leader starts from when it becomes the leader (KIP-932).

Layout as Kafka's ReadShareGroupStateRequest/Response.json v0 (flexible).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    84,
    "ReadShareGroupState",
    versions="0",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("topics", "[]ReadStateData", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionData", fields=[
                Field("partition", "int32"),
                Field("leader_epoch", "int32"),
            ]),
        ]),
    ],
    response=[
        Field("results", "[]ReadStateResult", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionResult", fields=[
                Field("partition", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                Field("state_epoch", "int32"),
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
)
