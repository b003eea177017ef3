"""DescribeUserScramCredentials (key 50): which SCRAM mechanisms each user has
credentials for, and their iteration counts (never the credentials). v0 is flexible."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    50,
    "DescribeUserScramCredentials",
    versions="0",
    flexible="0+",
    request=[
        Field("users", "[]UserName", nullable="0+", fields=[Field("name", "string")]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field(
            "results",
            "[]DescribeUserScramCredentialsResult",
            fields=[
                Field("user", "string"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                Field(
                    "credential_infos",
                    "[]CredentialInfo",
                    fields=[Field("mechanism", "int8"), Field("iterations", "int32")],
                ),
            ],
        ),
    ],
)
