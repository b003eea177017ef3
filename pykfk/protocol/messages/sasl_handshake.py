"""SaslHandshake (key 17): choose a SASL mechanism.

v0: the tokens follow as bare size-prefixed frames; v1: the tokens are carried by
SaslAuthenticate requests. Never flexible.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    17,
    "SaslHandshake",
    versions="0-1",
    flexible="none",
    request=[
        Field("mechanism", "string"),
    ],
    response=[
        Field("error_code", "int16"),
        Field("mechanisms", "[]string"),
    ],
)
