"""AddOffsetsToTxn (key 25): a transactional producer will commit a group's offsets in
its transaction (the group's ``__consumer_offsets`` partition joins it).

v1 same as v0; v2 may answer PRODUCER_FENCED; v3 first flexible version; v4
may answer TRANSACTION_ABORTABLE (KIP-890). Clients of transaction version 2 do not
send it: their TxnOffsetCommit v5 adds the partition.
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    25,
    "AddOffsetsToTxn",
    versions="0-4",
    flexible="3+",
    request=[
        Field("transactional_id", "string"),
        Field("producer_id", "int64"),
        Field("producer_epoch", "int16"),
        Field("group_id", "string"),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
    ],
)
