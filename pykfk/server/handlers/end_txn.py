"""EndTxn (key 26): commit or abort the producer's transaction (``pykfk.txn``). The
answer comes once PrepareCommit/PrepareAbort is stored; the markers follow, and
read_committed consumers see the transaction's records when its markers are written.
EndTxn out of order (no transaction open, or a commit after an abort began) gets
INVALID_TXN_STATE; PRODUCER_FENCED reaches versions below 2 as INVALID_PRODUCER_EPOCH.
v4 only says the client understands TRANSACTION_ABORTABLE (KIP-890 part 1); Kafka's
coordinator has no EndTxn answer that becomes it, so v4 is answered as v3.

v5 is transaction version 2 (KIP-890 part 2): the transaction ends at the next epoch, and
the answer carries the producer id and epoch for the next transaction (a new producer
id at epoch 0 once the epoch is exhausted); an abort with no transaction open bumps the
epoch as well.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 26
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: typed.EndTxnRequest) -> typed.EndTxnResponse:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if ctx.api_version >= 5:
        return _answer(*await coordinator.end_transaction_bumping(
            request.transactional_id, request.producer_id, request.producer_epoch, request.committed))
    code = await coordinator.end_transaction(request.transactional_id, request.producer_id, request.producer_epoch,
                                             request.committed)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return _answer(code)


def _answer(code: int, producer_id: int = -1, producer_epoch: int = -1) -> typed.EndTxnResponse:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": producer_epoch}
