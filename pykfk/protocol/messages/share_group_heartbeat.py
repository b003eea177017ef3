"""ShareGroupHeartbeat (key 76): a member of a share group (KIP-932) joins, stays or
leaves, and learns its epoch and the partitions it may fetch from.

Version 0 was Kafka 4.0's early access and is gone from Kafka 4.1; v1 is the first
stable version. The member generates its own member id. Every version is flexible;
``subscribed_topic_names`` null means "unchanged since the last heartbeat".
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    76,
    "ShareGroupHeartbeat",
    versions="1",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("member_id", "string"),
        Field("member_epoch", "int32"),
        Field("rack_id", "string", nullable="0+", default=None),
        Field("subscribed_topic_names", "[]string", nullable="0+", default=None),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("member_id", "string", nullable="0+", default=None),
        Field("member_epoch", "int32"),
        Field("heartbeat_interval_ms", "int32"),
        Field("assignment", "Assignment", nullable="0+", default=None, fields=[
            Field("topic_partitions", "[]TopicPartitions", fields=[
                Field("topic_id", "uuid"), Field("partitions", "[]int32")]),
        ]),
    ],
)
