"""ShareGroupDescribe (key 77): share groups with their members and assignments (KIP-932).
v1 is Kafka 4.1's first stable version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    77,
    "ShareGroupDescribe",
    versions="1",
    flexible="0+",
    request=[
        Field("group_ids", "[]string"),
        Field("include_authorized_operations", "bool"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("groups", "[]DescribedGroup", fields=[
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+", default=None),
            Field("group_id", "string"),
            Field("group_state", "string"),
            Field("group_epoch", "int32"),
            Field("assignment_epoch", "int32"),
            Field("assignor_name", "string"),
            Field("members", "[]Member", fields=[
                Field("member_id", "string"),
                Field("rack_id", "string", nullable="0+", default=None),
                Field("member_epoch", "int32"),
                Field("client_id", "string"),
                Field("client_host", "string"),
                Field("subscribed_topic_names", "[]string"),
                Field("assignment", "Assignment", fields=[
                    Field("topic_partitions", "[]TopicPartitions", fields=[
                        Field("topic_id", "uuid"), Field("topic_name", "string"), Field("partitions", "[]int32")]),
                ]),
            ]),
            Field("authorized_operations", "int32", default=-2147483648),
        ]),
    ],
)
