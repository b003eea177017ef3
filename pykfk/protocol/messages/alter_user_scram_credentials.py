"""AlterUserScramCredentials (key 51): set or remove users' SCRAM credentials. The
client sends the salted password (never the password); the broker derives and keeps
StoredKey and ServerKey. v0 is flexible."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    51,
    "AlterUserScramCredentials",
    versions="0",
    flexible="0+",
    request=[
        Field(
            "deletions",
            "[]ScramCredentialDeletion",
            fields=[Field("name", "string"), Field("mechanism", "int8")],
        ),
        Field(
            "upsertions",
            "[]ScramCredentialUpsertion",
            fields=[
                Field("name", "string"),
                Field("mechanism", "int8"),
                Field("iterations", "int32"),
                Field("salt", "bytes"),
                Field("salted_password", "bytes"),
            ],
        ),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "results",
            "[]AlterUserScramCredentialsResult",
            fields=[
                Field("user", "string"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ],
        ),
    ],
)
