"""ExpireDelegationToken (key 40): bring a token's expiry forward; a negative period
ends it at once (KIP-48). v2 is the first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    40,
    "ExpireDelegationToken",
    versions="1-2",
    flexible="2+",
    request=[
        Field("hmac", "bytes"),
        Field("expiry_time_period_ms", "int64"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("expiry_timestamp_ms", "int64"),
        Field("throttle_time_ms", "int32"),
    ],
)
