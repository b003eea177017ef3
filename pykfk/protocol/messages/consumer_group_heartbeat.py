"""ConsumerGroupHeartbeat (key 68): a member of a consumer-protocol group (KIP-848) joins,
stays or leaves, and learns its epoch and assignment.

v1 adds subscribed_topic_regex; from v1 the member generates its own member id (KIP-1082).
Every version is flexible. Fields that are null mean "unchanged since the last heartbeat".
"""

from ..schema import ApiSpec, Field


def _topic_partitions(name: str, nullable: str | None = None) -> Field:
    return Field(name, "[]TopicPartitions", nullable=nullable, default=None if nullable else (),
                 fields=[Field("topic_id", "uuid"), Field("partitions", "[]int32")])


SPEC = ApiSpec(
    68,
    "ConsumerGroupHeartbeat",
    versions="0-1",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("member_id", "string"),
        Field("member_epoch", "int32"),
        Field("instance_id", "string", nullable="0+", default=None),
        Field("rack_id", "string", nullable="0+", default=None),
        Field("rebalance_timeout_ms", "int32", default=-1),
        Field("subscribed_topic_names", "[]string", nullable="0+", default=None),
        Field("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
        Field("server_assignor", "string", nullable="0+", default=None),
        _topic_partitions("topic_partitions", nullable="0+"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("member_id", "string", nullable="0+", default=None),
        Field("member_epoch", "int32"),
        Field("heartbeat_interval_ms", "int32"),
        Field("assignment", "Assignment", nullable="0+", default=None,
              fields=[_topic_partitions("topic_partitions")]),
    ],
)
