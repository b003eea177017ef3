"""OffsetDelete (key 47): remove a group's committed offsets of some partitions (KIP-496).
Only v0, not flexible. The group must not be subscribed to the topics it deletes.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    47,
    "OffsetDelete",
    versions="0",
    flexible=None,
    request=[
        Field("group_id", "string"),
        Field("topics", "[]OffsetDeleteRequestTopic", fields=[
            Field("name", "string"),
            Field("partitions", "[]OffsetDeleteRequestPartition",
                  fields=[Field("partition_index", "int32")]),
        ]),
    ],
    response=[
        Field("error_code", "int16"),
        Field("throttle_time_ms", "int32"),
        Field("topics", "[]OffsetDeleteResponseTopic", fields=[
            Field("name", "string"),
            Field("partitions", "[]OffsetDeleteResponsePartition", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
            ]),
        ]),
    ],
)
