"""DescribeCluster (key 60): cluster id, controller and brokers (KIP-700), what admin
clients ask instead of Metadata. Flexible from v0; v1 adds endpoint types; v2 fenced
brokers."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    60,
    "DescribeCluster",
    versions="0-2",
    flexible="0+",
    request=[
        Field("include_cluster_authorized_operations", "bool"),
        Field("endpoint_type", "int8", "1+", default=1),
        Field("include_fenced_brokers", "bool", "2+"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("endpoint_type", "int8", "1+", default=1),
        Field("cluster_id", "string"),
        Field("controller_id", "int32", default=-1),
        Field("brokers", "[]DescribeClusterBroker", fields=[
            Field("broker_id", "int32"),
            Field("host", "string"),
            Field("port", "int32"),
            Field("rack", "string", nullable="0+", default=None),
            Field("is_fenced", "bool", "2+", default=False),
        ]),
        Field("cluster_authorized_operations", "int32", default=-2147483648),
    ],
)
