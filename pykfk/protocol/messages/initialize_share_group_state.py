"""InitializeShareGroupState (key 83): broker to broker, to the share coordinator (the
leader of the ``__share_group_state`` partition of a share partition): a share group's
state of partitions it starts on, before any delivery (KIP-932).

Layout as Kafka's InitializeShareGroupStateRequest/Response.json v0 (flexible).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    83,
    "InitializeShareGroupState",
    versions="0",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("topics", "[]InitializeStateData", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionData", fields=[
                Field("partition", "int32"),
                Field("state_epoch", "int32"),
                Field("start_offset", "int64"),
            ]),
        ]),
    ],
    response=[
        Field("results", "[]InitializeStateResult", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionResult", fields=[
                Field("partition", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)
