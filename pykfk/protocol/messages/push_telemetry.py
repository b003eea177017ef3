"""PushTelemetry (key 72, KIP-714): a client's metrics as an OTLP MetricsData protobuf,
possibly compressed. v0 only, flexible."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    72,
    "PushTelemetry",
    versions="0",
    flexible="0+",
    request=[
        Field("client_instance_id", "uuid"),
        Field("subscription_id", "int32"),
        Field("terminating", "bool"),
        Field("compression_type", "int8"),
        Field("metrics", "bytes"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
    ],
)
