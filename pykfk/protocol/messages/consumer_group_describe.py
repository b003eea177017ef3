"""ConsumerGroupDescribe (key 69): state, epochs and members of consumer-protocol groups
(KIP-848). v1 adds each member's type (KIP-1099). Every version is flexible."""

from ..schema import ApiSpec, Field


def _assignment(name: str) -> Field:
    return Field(name, "Assignment", fields=[
        Field("topic_partitions", "[]TopicPartitions", fields=[
            Field("topic_id", "uuid"),
            Field("topic_name", "string"),
            Field("partitions", "[]int32"),
        ]),
    ])


SPEC = ApiSpec(
    69,
    "ConsumerGroupDescribe",
    versions="0-1",
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
                Field("instance_id", "string", nullable="0+", default=None),
                Field("rack_id", "string", nullable="0+", default=None),
                Field("member_epoch", "int32"),
                Field("client_id", "string"),
                Field("client_host", "string"),
                Field("subscribed_topic_names", "[]string"),
                Field("subscribed_topic_regex", "string", nullable="0+", default=None),
                _assignment("assignment"),
                _assignment("target_assignment"),
                Field("member_type", "int8", "1+", default=-1),
            ]),
            Field("authorized_operations", "int32", default=-2147483648),
        ]),
    ],
)
