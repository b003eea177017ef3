"""TxnOffsetCommit (key 28): a transactional producer commits a consumer group's offsets
inside its transaction (after AddOffsetsToTxn). The group coordinator (``pykfk.group``)
writes them as the producer's transactional records in ``__consumer_offsets``; OffsetFetch
sees them once the transaction's COMMIT marker is written there, never after an abort.
Needs Write on the transactional id and Read on the group and the topics, as in Kafka.

The group's ``__consumer_offsets`` partition must be in the producer's open transaction
(KIP-890's verification, as for a transactional Produce: the id's coordinator is asked,
once per transaction and partition), or the offsets would wait for a marker that never
comes. When it is not, v4+ (KIP-890) answer TRANSACTION_ABORTABLE, so the producer
aborts and goes on, and older versions INVALID_TXN_STATE, as Kafka does. When no
coordinator answers the check, COORDINATOR_LOAD_IN_PROGRESS (the producer retries;
COORDINATOR_NOT_AVAILABLE below v2, as Kafka answers clients older than 2.0).

v5 comes from transaction version 2 clients, which send no AddOffsetsToTxn: the
coordinator is asked to add the partition to the transaction (opening it if need be)
instead of checking it is there.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.group import api
from pykfk.group.offsets import OFFSETS_TOPIC
from pykfk.protocol.typed import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 28
VERSIONS = (0, 5)


def _all(request: TxnOffsetCommitRequest, code: int) -> TxnOffsetCommitResponse:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in request.topics]}


async def _verify(ctx: RequestContext, request: TxnOffsetCommitRequest) -> int:
    """NONE when the group's offsets partition is in the producer's open transaction (or
    this broker is not the group's coordinator, which the group coordinator answers),
    else the error for this request's version."""
    groups = ctx.broker.group_coordinator
    if not groups.owns(request.group_id):
        return ErrorCode.NONE
    partition = (OFFSETS_TOPIC, groups.partition_for(request.group_id))
    try:
        state = ctx.broker.replica_manager.leader_log(*partition).producer_state
    except KafkaError:
        return ErrorCode.NONE
    entry = state.producers.get(request.producer_id)
    if request.producer_id in state.ongoing and entry is not None \
            and entry.producer_epoch == request.producer_epoch:
        return ErrorCode.NONE  # checked at the transaction's first commit to the partition
    codes = await ctx.broker.verify_transaction(request.transactional_id, request.producer_id,
                                                request.producer_epoch, [partition], add=ctx.api_version >= 5)
    code = codes.get(partition, ErrorCode.NONE)
    if code == ErrorCode.INVALID_TXN_STATE:
        return ErrorCode.TRANSACTION_ABORTABLE if ctx.api_version >= 4 else ErrorCode.INVALID_TXN_STATE
    if code == ErrorCode.NOT_ENOUGH_REPLICAS:  # no coordinator answered, or the last transaction ends
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if ctx.api_version >= 2 else ErrorCode.COORDINATOR_NOT_AVAILABLE
    return code


async def handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _all(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        return _all(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if any(not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name) for t in request.topics):
        return _all(request, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    code = await _verify(ctx, request)
    if code != ErrorCode.NONE:
        return _all(request, code)
    return await api.txn_offset_commit(ctx.broker.group_coordinator, ctx.api_version, request)
