"""ListTransactions (key 66, KIP-664): the transactional ids this broker coordinates,
filtered by state name (unknown names come back in ``unknown_state_filters``), producer
id, (v1, KIP-994) how long their transaction has been open (longer than
``duration_filter`` ms, open transactions only) and (v2, KIP-1152) a regular expression
the whole id must match (``transactional_id_pattern``; null or empty: every id; one
that does not compile: INVALID_REGULAR_EXPRESSION and nothing listed). Ids the principal
may not Describe are left out."""

from __future__ import annotations

import re

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.txn.records import TxnState

API_KEY = 66
VERSIONS = (0, 2)

_STATE_NAMES = {state.display_name: state for state in TxnState}


def _answer(code: int, unknown: list[str], listed: list[typed.ListTransactionsResponseTransactionState]
            ) -> typed.ListTransactionsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "unknown_state_filters": unknown,
            "transaction_states": listed}


async def handle(ctx: RequestContext, request: typed.ListTransactionsRequest) -> typed.ListTransactionsResponse:
    coordinator = ctx.broker.transaction_coordinator
    unknown = [name for name in request.state_filters if name not in _STATE_NAMES]
    states = {_STATE_NAMES[name] for name in request.state_filters if name in _STATE_NAMES}
    producer_ids = set(request.producer_id_filters)
    duration_ms = request.duration_filter
    pattern = None
    if request.transactional_id_pattern:
        try:
            pattern = re.compile(request.transactional_id_pattern)
        except (re.error, RecursionError, OverflowError):
            return _answer(ErrorCode.INVALID_REGULAR_EXPRESSION, unknown, [])
    now_ms = ctx.broker.replica_manager.clock.time_ms()
    listed: list[typed.ListTransactionsResponseTransactionState] = []
    for meta in coordinator.list_transactions() if coordinator is not None else ():
        if (states and meta.state not in states) or (producer_ids and meta.producer_id not in producer_ids):
            continue
        if duration_ms >= 0 and (meta.state != TxnState.ONGOING or now_ms - meta.start_ms <= duration_ms):
            continue
        if pattern is not None and pattern.fullmatch(meta.transactional_id) is None:
            continue
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id):
            continue
        listed.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                       "transaction_state": TxnState(meta.state).display_name})
    return _answer(ErrorCode.NONE, unknown, listed)
