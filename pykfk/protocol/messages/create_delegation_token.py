"""CreateDelegationToken (key 38): a delegation token for the requester, or (v3, KIP-373)
for another owner (KIP-48). v0 is gone since Kafka 4.0 (KIP-896); v2 is the first
flexible version."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    38,
    "CreateDelegationToken",
    versions="1-3",
    flexible="2+",
    request=[
        Field("owner_principal_type", "string", "3+", nullable="3+", default=None),
        Field("owner_principal_name", "string", "3+", nullable="3+", default=None),
        Field(
            "renewers",
            "[]CreatableRenewers",
            fields=[Field("principal_type", "string"), Field("principal_name", "string")],
        ),
        Field("max_lifetime_ms", "int64"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("principal_type", "string"),
        Field("principal_name", "string"),
        Field("token_requester_principal_type", "string", "3+"),
        Field("token_requester_principal_name", "string", "3+"),
        Field("issue_timestamp_ms", "int64"),
        Field("expiry_timestamp_ms", "int64"),
        Field("max_timestamp_ms", "int64"),
        Field("token_id", "string"),
        Field("hmac", "bytes"),
        Field("throttle_time_ms", "int32"),
    ],
)
