"""ListTransactions (key 66, KIP-664): the transactional ids this broker coordinates,
filtered by state name (unknown names come back in ``unknown_state_filters``), producer
id and (v1, KIP-994) how long their transaction has been open. Ids the principal may
not Describe are left out."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.protocol.types import Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.txn.records import TxnState

API_KEY = 66
VERSIONS = (0, 1)

_STATE_NAMES = {state.display_name: state for state in TxnState}


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    coordinator = ctx.broker.transaction_coordinator
    unknown = [name for name in request.state_filters if name not in _STATE_NAMES]
    states = {_STATE_NAMES[name] for name in request.state_filters if name in _STATE_NAMES}
    producer_ids = set(request.producer_id_filters)
    duration_ms = getattr(request, "duration_filter", -1)
    now_ms = ctx.broker.replica_manager.clock.time_ms()
    listed = []
    for meta in coordinator.list_transactions() if coordinator is not None else ():
        if (states and meta.state not in states) or (producer_ids and meta.producer_id not in producer_ids):
            continue
        if duration_ms >= 0 and (meta.state != TxnState.ONGOING or now_ms - meta.start_ms < duration_ms):
            continue
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id):
            continue
        listed.append({"transactional_id": meta.transactional_id, "producer_id": meta.producer_id,
                       "transaction_state": TxnState(meta.state).display_name})
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "unknown_state_filters": unknown,
            "transaction_states": listed}
