"""SaslAuthenticate (key 36): one SASL token exchange inside a Kafka request.

v1 adds session_lifetime_ms (KIP-368, 0 = no re-authentication); v2 first flexible
version.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    36,
    "SaslAuthenticate",
    versions="0-2",
    flexible="2+",
    request=[
        Field("auth_bytes", "bytes"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Field("auth_bytes", "bytes"),
        Field("session_lifetime_ms", "int64", "1+", default=0),
    ],
)
