"""ApiVersions (key 18): the versions of every API the broker serves.

v1 adds throttle_time_ms; v2 same as v1; v3 first flexible version, adds the client
software name/version and tagged feature fields (KIP-511, KIP-584); v4 same schema as v3
(only relaxes feature MinVersion semantics). The response header stays v0 in every
version, and an unsupported request version is answered in the v0 layout
(see framing.encode_api_versions_fallback).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    18,
    "ApiVersions",
    versions="0-4",
    flexible="3+",
    response_header_v0=True,
    request=[
        Field("client_software_name", "string", "3+"),
        Field("client_software_version", "string", "3+"),
    ],
    response=[
        Field("error_code", "int16"),
        Field(
            "api_keys",
            "[]ApiVersion",
            fields=[
                Field("api_key", "int16"),
                Field("min_version", "int16"),
                Field("max_version", "int16"),
            ],
        ),
        Field("throttle_time_ms", "int32", "1+"),
        Field(
            "supported_features",
            "[]SupportedFeatureKey",
            "3+",
            tag=0,
            fields=[
                Field("name", "string", "3+"),
                Field("min_version", "int16", "3+"),
                Field("max_version", "int16", "3+"),
            ],
        ),
        Field("finalized_features_epoch", "int64", "3+", tag=1, default=-1),
        Field(
            "finalized_features",
            "[]FinalizedFeatureKey",
            "3+",
            tag=2,
            fields=[
                Field("name", "string", "3+"),
                Field("max_version_level", "int16", "3+"),
                Field("min_version_level", "int16", "3+"),
            ],
        ),
        Field("zk_migration_ready", "bool", "3+", tag=3, default=False),
    ],
)
