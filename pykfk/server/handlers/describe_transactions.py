"""DescribeTransactions (key 65, KIP-664): state, producer, timeout, start time and
partitions of transactional ids this broker coordinates (NOT_COORDINATOR for others,
TRANSACTIONAL_ID_NOT_FOUND for unknown ones). Needs Describe on each transactional id."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.txn.records import TxnState, partitions_by_topic

API_KEY = 65
VERSIONS = (0, 0)


def _describe(ctx: RequestContext, transactional_id: str) -> typed.DescribeTransactionsResponseTransactionState:
    answer: typed.DescribeTransactionsResponseTransactionState = {"transactional_id": transactional_id, "transaction_state": "",
                              "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                              "producer_epoch": -1, "topics": []}
    coordinator = ctx.broker.transaction_coordinator
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return {**answer, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if coordinator is None:
        return {**answer, "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    code, meta = coordinator.describe(transactional_id)
    if meta is None:
        return {**answer, "error_code": code}
    return {**answer, "error_code": ErrorCode.NONE, "transaction_state": TxnState(meta.state).display_name,
            "transaction_timeout_ms": meta.timeout_ms,
            "transaction_start_time_ms": meta.start_ms if meta.state == TxnState.ONGOING else -1,
            "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
            "topics": [{"topic": t, "partitions": ps} for t, ps in partitions_by_topic(meta.partitions).items()]}


async def handle(ctx: RequestContext, request: typed.DescribeTransactionsRequest) -> typed.DescribeTransactionsResponse:
    return {"throttle_time_ms": 0,
            "transaction_states": [_describe(ctx, tid) for tid in request.transactional_ids]}
