"""InitProducerId (key 22): a producer id and epoch for idempotent and transactional
producers.

Without a transactional id: a fresh producer id at epoch 0. Ids come from the metadata
store, which persists them in blocks so that no id is handed out twice, even across
restarts; while a new block cannot be saved, COORDINATOR_LOAD_IN_PROGRESS (Kafka's
answer when it has no ids to hand out; clients retry). With one, the transaction
coordinator answers (``pykfk.txn``): the id's producer id with its epoch bumped,
fencing older producers of the same id; an open transaction is aborted first
(CONCURRENT_TRANSACTIONS until it is, the client retries).
From v3 a producer may name its current producer id and epoch to bump its own epoch
after an abortable error (KIP-360); a stale one gets PRODUCER_FENCED, which versions
below 4 receive as INVALID_PRODUCER_EPOCH (KIP-588). v5 (KIP-890) is answered as v4.
"""

from __future__ import annotations

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 22
VERSIONS = (0, 5)


def _answer(code: int, producer_id: int = -1, producer_epoch: int = -1) -> typed.InitProducerIdResponse:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": producer_epoch}


async def handle(ctx: RequestContext, request: typed.InitProducerIdRequest) -> typed.InitProducerIdResponse:
    if request.transactional_id is not None:
        return await _transactional(ctx, request, request.transactional_id)
    authorizer = ctx.broker.authorizer
    if authorizer is not None and not (
            ctx.allowed_on_cluster(Operation.IDEMPOTENT_WRITE)
            or authorizer.authorize_any(ctx.session.principal, ctx.session.client_ip, Operation.WRITE,
                                        ResourceType.TOPIC)):
        # Kafka: an idempotent producer needs IdempotentWrite on the cluster or Write on some topic.
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = await ctx.broker.allocate_producer_id()
    except MetadataWriteError:
        # Kafka's answer while it has no block of ids to hand out: the client retries.
        return _answer(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return _answer(ErrorCode.NONE, producer_id, 0)


async def _transactional(ctx: RequestContext, request: typed.InitProducerIdRequest,
                         transactional_id: str) -> typed.InitProducerIdResponse:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return _answer(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        return _answer(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    if transactional_id == "":
        return _answer(ErrorCode.INVALID_REQUEST)
    code, producer_id, epoch = await coordinator.init_producer_id(
        transactional_id, request.transaction_timeout_ms, request.producer_id, request.producer_epoch)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return _answer(code, producer_id, epoch)
