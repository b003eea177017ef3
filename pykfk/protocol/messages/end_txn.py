"""EndTxn (key 26): commit or abort the producer's ongoing transaction.

v1 same as v0; v2 may answer PRODUCER_FENCED; v3 first flexible version; v4 may answer
TRANSACTION_ABORTABLE (KIP-890 part 1). v5 (KIP-890 part 2, transaction
version 2): the epoch is bumped at the end of every transaction and the response carries
the producer id and epoch to use next.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    26,
    "EndTxn",
    versions="0-5",
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
        Field("producer_id", "int64", "5+", default=-1),
        Field("producer_epoch", "int16", "5+", default=-1),
    ],
)
