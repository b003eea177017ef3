"""ListPartitionReassignments (key 46): the reassignments in progress, with the replicas
being added and removed (KIP-455). Only v0, flexible. Null ``topics`` lists every one.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    46,
    "ListPartitionReassignments",
    versions="0",
    flexible="0+",
    request=[
        Field("timeout_ms", "int32", default=60000),
        Field("topics", "[]ListPartitionReassignmentsTopics", nullable="0+", default=None,
              fields=[
                  Field("name", "string"),
                  Field("partition_indexes", "[]int32"),
              ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("topics", "[]OngoingTopicReassignment", fields=[
            Field("name", "string"),
            Field("partitions", "[]OngoingPartitionReassignment", fields=[
                Field("partition_index", "int32"),
                Field("replicas", "[]int32"),
                Field("adding_replicas", "[]int32"),
                Field("removing_replicas", "[]int32"),
            ]),
        ]),
    ],
)
