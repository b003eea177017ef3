"""DescribeDelegationToken (key 41): the tokens of some owners (null: every token) that
the requester may see (KIP-48). v2 is the first flexible version, v3 adds the token
requester (KIP-373)."""

from ..schema import ApiSpec, Field

_PRINCIPAL = [Field("principal_type", "string"), Field("principal_name", "string")]

SPEC = ApiSpec(
    41,
    "DescribeDelegationToken",
    versions="1-3",
    flexible="2+",
    request=[
        Field("owners", "[]DescribeDelegationTokenOwner", nullable="0+", fields=_PRINCIPAL),
    ],
    response=[
        Field("error_code", "int16"),
        Field(
            "tokens",
            "[]DescribedDelegationToken",
            fields=[
                *_PRINCIPAL,
                Field("token_requester_principal_type", "string", "3+"),
                Field("token_requester_principal_name", "string", "3+"),
                Field("issue_timestamp", "int64"),
                Field("expiry_timestamp", "int64"),
                Field("max_timestamp", "int64"),
                Field("token_id", "string"),
                Field("hmac", "bytes"),
                Field("renewers", "[]DescribedDelegationTokenRenewer", fields=_PRINCIPAL),
            ],
        ),
        Field("throttle_time_ms", "int32"),
    ],
)
