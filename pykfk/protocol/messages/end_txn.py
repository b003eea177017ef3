"""EndTxn (key 26): commit or abort the producer's ongoing transaction.

v1 same as v0; v2 may answer PRODUCER_FENCED; v3 first flexible version; v4 may answer
TRANSACTION_ABORTABLE (KIP-890 part 1). v5 (KIP-890 part 2, an epoch bump per
transaction, ProducerId/ProducerEpoch in the response) is not declared.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    26,
    "EndTxn",
    versions="0-4",
    flexible="3+",
    request=[
        Field("transactional_id", "string"),
        Field("producer_id", "int64"),
        Field("producer_epoch", "int16"),
        Field("committed", "bool"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
    ],
)
