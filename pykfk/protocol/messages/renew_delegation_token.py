"""RenewDelegationToken (key 39): push a token's expiry out, never past its maximum
lifetime (KIP-48). v2 is the first flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    39,
    "RenewDelegationToken",
    versions="1-2",
    flexible="2+",
    request=[
        Field("hmac", "bytes"),
        Field("renew_period_ms", "int64"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("expiry_timestamp_ms", "int64"),
        Field("throttle_time_ms", "int32"),
    ],
)
