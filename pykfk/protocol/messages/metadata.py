"""Metadata (key 3): brokers, controller, topics and partition leaders.

v1 adds rack, controller_id, is_internal, null topics = all topics (in v0 an empty list
means all); v2 adds cluster_id; v3 adds throttle_time_ms; v4 adds
allow_auto_topic_creation; v5 adds offline_replicas; v6 same as v5; v7 adds leader_epoch;
v8 adds authorized operations; v9 first flexible version; v10 adds topic ids; v11
drops the cluster's authorized operations (DescribeCluster has them); v12 lets a request
name a topic by id alone (null name); v13 adds a top-level error_code (KIP-1102: e.g.
REBOOTSTRAP_REQUIRED, so the client starts over from its bootstrap servers).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    3,
    "Metadata",
    versions="0-13",
    flexible="9+",
    request=[
        Field(
            "topics",
            "[]MetadataRequestTopic",
            nullable="1+",
            fields=[
                Field("topic_id", "uuid", "10+"),
                Field("name", "string", nullable="10+"),
            ],
        ),
        Field("allow_auto_topic_creation", "bool", "4+", default=True),
        Field("include_cluster_authorized_operations", "bool", "8-10"),
        Field("include_topic_authorized_operations", "bool", "8+"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "3+"),
        Field(
            "brokers",
            "[]MetadataResponseBroker",
            fields=[
                Field("node_id", "int32"),
                Field("host", "string"),
                Field("port", "int32"),
                Field("rack", "string", "1+", nullable="1+", default=None),
            ],
        ),
        Field("cluster_id", "string", "2+", nullable="2+", default=None),
        Field("controller_id", "int32", "1+", default=-1),
        Field(
            "topics",
            "[]MetadataResponseTopic",
            fields=[
                Field("error_code", "int16"),
                Field("name", "string", nullable="12+"),
                Field("topic_id", "uuid", "10+"),
                Field("is_internal", "bool", "1+", default=False),
                Field(
                    "partitions",
                    "[]MetadataResponsePartition",
                    fields=[
                        Field("error_code", "int16"),
                        Field("partition_index", "int32"),
                        Field("leader_id", "int32"),
                        Field("leader_epoch", "int32", "7+", default=-1),
                        Field("replica_nodes", "[]int32"),
                        Field("isr_nodes", "[]int32"),
                        Field("offline_replicas", "[]int32", "5+"),
                    ],
                ),
                Field("topic_authorized_operations", "int32", "8+", default=-2147483648),
            ],
        ),
        Field("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
        Field("error_code", "int16", "13+"),
    ],
)
