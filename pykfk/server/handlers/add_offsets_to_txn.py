"""AddOffsetsToTxn (key 25): the producer will commit a consumer group's offsets in its
transaction, so the group's ``__consumer_offsets`` partition joins the transaction (and
gets its marker when it ends). PRODUCER_FENCED reaches versions below 2 as
INVALID_PRODUCER_EPOCH (KIP-588). v4 (KIP-890) is answered as v3; clients of transaction
version 2 send TxnOffsetCommit v5 instead, which adds the partition itself.
"""

from __future__ import annotations

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.group.offsets import OFFSETS_TOPIC
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 25
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: typed.AddOffsetsToTxnRequest) -> typed.AddOffsetsToTxnResponse:
    return {"throttle_time_ms": 0, "error_code": await _add(ctx, request)}


async def _add(ctx: RequestContext, request: typed.AddOffsetsToTxnRequest) -> int:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    try:
        await ctx.broker.ensure_offsets_topic()
    except MetadataWriteError:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    partition = ctx.broker.group_coordinator.partition_for(request.group_id)
    code = await coordinator.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                            [(OFFSETS_TOPIC, partition)])
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return code
