"""FindCoordinator (key 10): the broker that coordinates a group or transactional id.

v1 adds key_type, throttle_time_ms and error_message; v2 same as v1; v3 first flexible
version; v4 batches keys (coordinator_keys in, one coordinators entry per key out); v5
may answer TRANSACTION_ABORTABLE (KIP-890); v6 adds key_type 2, a share-group partition's
state ("groupId:topicId:partition", KIP-932).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    10,
    "FindCoordinator",
    versions="0-6",
    flexible="3+",
    request=[
        Field("key", "string", "0-3"),
        Field("key_type", "int8", "1+", default=0),
        Field("coordinator_keys", "[]string", "4+"),
    ],
    response=[
        Field("throttle_time_ms", "int32", "1+"),
        Field("error_code", "int16", "0-3"),
        Field("error_message", "string", "1-3", nullable="1-3"),
        Field("node_id", "int32", "0-3"),
        Field("host", "string", "0-3"),
        Field("port", "int32", "0-3"),
        Field("coordinators", "[]Coordinator", "4+", fields=[
            Field("key", "string", "4+"),
            Field("node_id", "int32", "4+"),
            Field("host", "string", "4+"),
            Field("port", "int32", "4+"),
            Field("error_code", "int16", "4+"),
            Field("error_message", "string", "4+", nullable="4+"),
        ]),
    ],
)
