"""TxnOffsetCommit (key 28): a transactional producer commits a consumer group's offsets
inside its transaction (after AddOffsetsToTxn). The group coordinator (``pykfk.group``)
writes them as the producer's transactional records in ``__consumer_offsets``; OffsetFetch
sees them once the transaction's COMMIT marker is written there, never after an abort.
Needs Write on the transactional id and Read on the group and the topics, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.types import Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 28
VERSIONS = (0, 3)


def _all(request: Struct, code: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in request.topics]}


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    if not ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _all(request, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.allowed(Operation.READ, ResourceType.GROUP, request.group_id):
        return _all(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if any(not ctx.allowed(Operation.READ, ResourceType.TOPIC, t.name) for t in request.topics):
        return _all(request, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    return await api.txn_offset_commit(ctx.broker.group_coordinator, ctx.api_version, request)
