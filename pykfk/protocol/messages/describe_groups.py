"""DescribeGroups (key 15): state and members of consumer groups.

v1 adds throttle_time_ms; v2 same; v3 adds authorized operations; v4 adds
group_instance_id of members; v5 first flexible version; v6 adds error_message and
answers GROUP_ID_NOT_FOUND for groups that do not exist (KIP-1043).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    15,
    "DescribeGroups",
    versions="0-6",
    flexible="5+",
    request=[
        Field("groups", "[]string"),
        Field("include_authorized_operations", "bool", "3+"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field(
            "groups",
            "[]DescribedGroup",
            fields=[
                Field("error_code", "int16"),
                Field("error_message", "string", "6+", nullable="6+", default=None),
                Field("group_id", "string"),
                Field("group_state", "string"),
                Field("protocol_type", "string"),
                Field("protocol_data", "string"),
                Field(
                    "members",
                    "[]DescribedGroupMember",
                    fields=[
                        Field("member_id", "string"),
                        Field("group_instance_id", "string", "4+", nullable="4+", default=None),
                        Field("client_id", "string"),
                        Field("client_host", "string"),
                        Field("member_metadata", "bytes"),
                        Field("member_assignment", "bytes"),
                    ],
                ),
                Field("authorized_operations", "int32", "3+", default=-2147483648),
            ],
        ),
    ],
)
