"""CreateAcls (key 30): add ACL bindings, one result per binding in request order.

v1 adds the resource pattern type (KIP-290); v2 first flexible version; v3 same as v2.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    30,
    "CreateAcls",
    versions="0-3",
    flexible="2+",
    request=[
        Field(
            "creations",
            "[]AclCreation",
            fields=[
                Field("resource_type", "int8"),
                Field("resource_name", "string"),
                Field("resource_pattern_type", "int8", "1+", default=3),
                Field("principal", "string"),
                Field("host", "string"),
                Field("operation", "int8"),
                Field("permission_type", "int8"),
            ],
        ),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "results",
            "[]AclCreationResult",
            fields=[
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
            ],
        ),
    ],
)
