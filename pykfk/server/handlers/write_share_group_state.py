"""WriteShareGroupState (key 85): a share-partition leader on another broker stores the
new state of a share partition at this broker, its share coordinator
(``pykfk.server.share_state``): appended to ``__share_group_state`` (acks=all) before the
answer. FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for a writer older than the stored
state; NOT_COORDINATOR when this broker does not lead the state partition; ClusterAction
on the cluster."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.group.share.state_records import ShareSnapshot
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.share_state import ShareKey, each_partition, persister_of

API_KEY = 85
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: typed.WriteShareGroupStateRequest
                 ) -> typed.WriteShareGroupStateResponse:
    store = persister_of(ctx.broker).store

    async def write(key: ShareKey, part: Any) -> int:
        if part.start_offset < 0:
            return ErrorCode.INVALID_REQUEST
        batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in part.state_batches]
        return await store.write(key, ShareSnapshot(part.state_epoch, part.start_offset, batches, part.leader_epoch))

    answers = await each_partition(request.group_id, request.topics,
                                   ctx.allowed_on_cluster(Operation.CLUSTER_ACTION), write)
    return {"results": [{"topic_id": topic_id, "partitions": [
        {"partition": p, "error_code": code, "error_message": None} for p, code in rows]}
        for topic_id, rows in answers]}
