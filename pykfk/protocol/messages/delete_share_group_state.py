"""DeleteShareGroupState (key 86): broker to broker, to the share coordinator (the leader
of the ``__share_group_state`` partition of a share partition): a share group's state of
partitions dropped (the group or its offsets deleted, KIP-932).

Layout as Kafka's DeleteShareGroupStateRequest/Response.json v0 (flexible).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    86,
    "DeleteShareGroupState",
    versions="0",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("topics", "[]DeleteStateData", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionData", fields=[
                Field("partition", "int32"),
            ]),
        ]),
    ],
    response=[
        Field("results", "[]DeleteStateResult", fields=[
            Field("topic_id", "uuid"),
            Field("partitions", "[]PartitionResult", fields=[
                Field("partition", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)
