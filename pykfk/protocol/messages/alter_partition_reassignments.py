"""AlterPartitionReassignments (key 45): start or cancel moving partitions to new
replica sets (KIP-455). Flexible from v0; v1 adds allow_replication_factor_change.
A partition's null ``replicas`` cancels its pending reassignment.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    45,
    "AlterPartitionReassignments",
    versions="0-1",
    flexible="0+",
    request=[
        Field("timeout_ms", "int32", default=60000),
        Field("allow_replication_factor_change", "bool", "1+", default=True),
        Field("topics", "[]ReassignableTopic", fields=[
            Field("name", "string"),
            Field("partitions", "[]ReassignablePartition", fields=[
                Field("partition_index", "int32"),
                Field("replicas", "[]int32", nullable="0+", default=None),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("allow_replication_factor_change", "bool", "1+", default=True),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("responses", "[]ReassignableTopicResponse", fields=[
            Field("name", "string"),
            Field("partitions", "[]ReassignablePartitionResponse", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ]),
        ]),
    ],
)
