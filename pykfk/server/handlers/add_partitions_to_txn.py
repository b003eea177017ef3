"""AddPartitionsToTxn (key 24): partitions join the producer's ongoing transaction
(``pykfk.txn``), before the producer writes to them.

Each partition gets one error: UNKNOWN_TOPIC_OR_PARTITION (and OPERATION_NOT_ATTEMPTED
for the others) when some partition does not exist, TOPIC_AUTHORIZATION_FAILED likewise,
else the coordinator's answer for the whole request. v4 carries several transactions
(the form brokers use among themselves, KIP-890); with ``verify_only`` the partitions are
only checked to be in the transaction. PRODUCER_FENCED reaches versions below 2 as
INVALID_PRODUCER_EPOCH (KIP-588). From v5 a verification answers as Kafka's coordinator
does for a caller that understands TRANSACTION_ABORTABLE: TRANSACTION_ABORTABLE for a
partition outside the open transaction, CONCURRENT_TRANSACTIONS while it is being
committed or aborted (v4, what pykfk's own brokers send, keeps INVALID_TXN_STATE for
both, the answer their Produce handling expects).
"""

from __future__ import annotations

from collections.abc import Sequence

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 24
VERSIONS = (0, 5)


def _results(codes: dict[tuple[str, int], int]) -> list[typed.AddPartitionsToTxnTopicResult]:
    by_topic: dict[str, list[typed.AddPartitionsToTxnPartitionResult]] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": partition, "partition_error_code": code})
    return [{"name": topic, "results_by_partition": results} for topic, results in by_topic.items()]


async def _add(ctx: RequestContext, transactional_id: str, producer_id: int, epoch: int, topics: Sequence[typed.AddPartitionsToTxnTopic],
               verify_only: bool = False) -> dict[tuple[str, int], int]:
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        return dict.fromkeys(partitions, int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return dict.fromkeys(partitions, int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    failed: dict[tuple[str, int], int] = {}
    for topic, partition in partitions:
        if not ctx.allowed(Operation.WRITE, ResourceType.TOPIC, topic):
            failed[(topic, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not _exists(ctx, topic, partition):
            failed[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if failed:
        return {tp: failed.get(tp, int(ErrorCode.OPERATION_NOT_ATTEMPTED)) for tp in partitions}
    if verify_only:
        abortable = ctx.api_version >= 5
        return {tp: int(coordinator.verify_partition(transactional_id, producer_id, epoch, tp, abortable=abortable))
                for tp in partitions}
    code = await coordinator.add_partitions(transactional_id, producer_id, epoch, partitions)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return dict.fromkeys(partitions, int(code))


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.broker.metadata.get_topic(topic)
    return info is not None and 0 <= partition < info.partitions


async def handle(ctx: RequestContext, request: typed.AddPartitionsToTxnRequest) -> typed.AddPartitionsToTxnResponse:
    if ctx.api_version < 4:
        codes = await _add(ctx, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                           request.v3_and_below_producer_epoch, request.v3_and_below_topics)
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": _results(codes)}
    results: list[typed.AddPartitionsToTxnResult] = []
    for txn in request.transactions:
        codes = await _add(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                           verify_only=txn.verify_only)
        results.append({"transactional_id": txn.transactional_id, "topic_results": _results(codes)})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "results_by_transaction": results}
