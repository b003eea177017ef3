"""DeleteAcls (key 31): remove the ACL bindings matching each filter, and list them.

v1 adds the pattern type filter (KIP-290); v2 first flexible version; v3 same as v2.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    31,
    "DeleteAcls",
    versions="0-3",
    flexible="2+",
    request=[
        Field(
            "filters",
            "[]DeleteAclsFilter",
            fields=[
                Field("resource_type_filter", "int8"),
                Field("resource_name_filter", "string", nullable="0+"),
                Field("pattern_type_filter", "int8", "1+", default=3),
                Field("principal_filter", "string", nullable="0+"),
                Field("host_filter", "string", nullable="0+"),
                Field("operation", "int8"),
                Field("permission_type", "int8"),
            ],
        ),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field(
            "filter_results",
            "[]DeleteAclsFilterResult",
            fields=[
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+", default=None),
                Field(
                    "matching_acls",
                    "[]DeleteAclsMatchingAcl",
                    fields=[
                        Field("error_code", "int16"),
                        Field("error_message", "string", nullable="0+", default=None),
                        Field("resource_type", "int8"),
                        Field("resource_name", "string"),
                        Field("pattern_type", "int8", "1+", default=3),
                        Field("principal", "string"),
                        Field("host", "string"),
                        Field("operation", "int8"),
                        Field("permission_type", "int8"),
                    ],
                ),
            ],
        ),
    ],
)
