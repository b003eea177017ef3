"""InitProducerId (key 22): a producer id and epoch for idempotent/transactional producers.

v1 same as v0; v2 first flexible version; v3 adds the current producer_id/epoch so a
producer can bump its epoch (KIP-360); v4 may answer PRODUCER_FENCED;
v5 may answer TRANSACTION_ABORTABLE (KIP-890).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    22,
    "InitProducerId",
    versions="0-5",
    flexible="2+",
    request=[
        Field("transactional_id", "string", nullable="0+"),
        Field("transaction_timeout_ms", "int32"),
        Field("producer_id", "int64", "3+", default=-1),
        Field("producer_epoch", "int16", "3+", default=-1),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("producer_id", "int64", default=-1),
        Field("producer_epoch", "int16"),
    ],
)
