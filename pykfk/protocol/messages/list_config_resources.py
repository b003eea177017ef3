"""ListConfigResources (key 74): the config resources of the cluster. v0 (Kafka 3.7's
ListClientMetricsResources) lists client-metrics resources only; v1 (KIP-1142) takes the
resource types to list (empty: every type) and names each resource's type."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    74,
    "ListConfigResources",
    versions="0-1",
    flexible="0+",
    request=[
        Field("resource_types", "[]int8", "1+"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("config_resources", "[]ConfigResource", fields=[
            Field("resource_name", "string"),
            Field("resource_type", "int8", "1+", default=16),
        ]),
    ],
)
