"""TxnOffsetCommit (key 28): offsets a transactional producer commits for a consumer
group inside its transaction; they become visible when the transaction commits.

v1 same as v0; v2 adds committed_leader_epoch; v3 first flexible version, adds the
group's generation_id, member_id and group_instance_id (KIP-447); v4 may answer
TRANSACTION_ABORTABLE (KIP-890); v5 the same fields, sent by transaction version 2
clients: it adds the group's offsets partition to the transaction itself (no
AddOffsetsToTxn before it).
"""

from ..schema import ApiSpec, Field

SPEC = ApiSpec(
    28,
    "TxnOffsetCommit",
    versions="0-5",
    flexible="3+",
    request=[
        Field("transactional_id", "string"),
        Field("group_id", "string"),
        Field("producer_id", "int64"),
        Field("producer_epoch", "int16"),
        Field("generation_id", "int32", "3+", default=-1),
        Field("member_id", "string", "3+", default=""),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
        Field("topics", "[]TxnOffsetCommitRequestTopic", fields=[
            Field("name", "string"),
            Field("partitions", "[]TxnOffsetCommitRequestPartition", fields=[
                Field("partition_index", "int32"),
                Field("committed_offset", "int64"),
                Field("committed_leader_epoch", "int32", "2+", default=-1),
                Field("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        Field("throttle_time_ms", "int32"),
        Field("topics", "[]TxnOffsetCommitResponseTopic", fields=[
            Field("name", "string"),
            Field("partitions", "[]TxnOffsetCommitResponsePartition", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
            ]),
        ]),
    ],
)
