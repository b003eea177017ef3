"""EndTxn (key 26): commit or abort the producer's transaction (``pykfk.txn``). The
answer comes once PrepareCommit/PrepareAbort is stored; the markers follow, and
read_committed consumers see the transaction's records when its markers are written.
EndTxn out of order (no transaction open, or a commit after an abort began) gets
INVALID_TXN_STATE; PRODUCER_FENCED reaches versions below 2 as INVALID_PRODUCER_EPOCH.
v4 only says the client understands TRANSACTION_ABORTABLE (KIP-890 part 1); Kafka's
coordinator has no EndTxn answer that becomes it, so v4 is answered as v3. v5 (an epoch
bump per transaction, transaction version 2) is not served.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 26
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: typed.EndTxnRequest) -> typed.EndTxnResponse:
    return {"throttle_time_ms": 0, "error_code": await _end(ctx, request)}


async def _end(ctx: RequestContext, request: typed.EndTxnRequest) -> int:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    code = await coordinator.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                             request.committed)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
