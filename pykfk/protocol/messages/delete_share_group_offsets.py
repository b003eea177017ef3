"""DeleteShareGroupOffsets (key 92): drop an empty share group's state of whole topics
(KIP-932); the group starts on them again from share.auto.offset.reset."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    92,
    "DeleteShareGroupOffsets",
    versions="0",
    flexible="0+",
    request=[
        Field("group_id", "string"),
        Field("topics", "[]DeleteShareGroupOffsetsRequestTopic", fields=[
            Field("topic_name", "string"),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+", default=None),
        Field("responses", "[]DeleteShareGroupOffsetsResponseTopic", fields=[
            Field("topic_name", "string"),
            Field("topic_id", "uuid"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)
