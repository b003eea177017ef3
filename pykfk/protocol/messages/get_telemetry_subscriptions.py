"""GetTelemetrySubscriptions (key 71, KIP-714): the metrics a client should push, how
often, and the client instance id the broker assigns when the client sends the zero
uuid. v0 only, flexible."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    71,
    "GetTelemetrySubscriptions",
    versions="0",
    flexible="0+",
    request=[
        Field("client_instance_id", "uuid"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("client_instance_id", "uuid"),
        Field("subscription_id", "int32"),
        Field("accepted_compression_types", "[]int8"),
        Field("push_interval_ms", "int32"),
        Field("telemetry_max_bytes", "int32"),
        Field("delta_temporality", "bool"),
        Field("requested_metrics", "[]string"),
    ],
)
