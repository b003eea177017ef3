"""ListTransactions (key 66, KIP-664): the transactional ids a broker coordinates, by
state and producer id. v0 is flexible; v1 adds a duration filter (KIP-994), v2 a
transactional id pattern (KIP-1152)."""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    66,
    "ListTransactions",
    versions="0-2",
    flexible="0+",
    request=[
        Field("state_filters", "[]string"),
        Field("producer_id_filters", "[]int64"),
        Field("duration_filter", "int64", "1+", default=-1),
        Field("transactional_id_pattern", "string", "2+", nullable="2+", default=None),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("unknown_state_filters", "[]string"),
        Field("transaction_states", "[]TransactionState", fields=[
            Field("transactional_id", "string"),
            Field("producer_id", "int64"),
            Field("transaction_state", "string"),
        ]),
    ],
)
