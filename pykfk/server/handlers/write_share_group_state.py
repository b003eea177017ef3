"""WriteShareGroupState (key 85): a share-partition leader on another broker stores the
new state of a share partition at this broker, its share coordinator
(``pykfk.server.share_state``): appended to ``__share_group_state`` (acks=all) before the
answer. FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH for a writer older than the stored
state; NOT_COORDINATOR when this broker does not lead the state partition; ClusterAction
on the cluster."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group.share.state_records import ShareSnapshot
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.share_state import persister_of

API_KEY = 85
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: typed.WriteShareGroupStateRequest
                 ) -> typed.WriteShareGroupStateResponse:
    allowed = ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    store = persister_of(ctx.broker).store
    results: list[typed.WriteShareGroupStateResponseWriteStateResult] = []
    for topic in request.topics:
        rows: list[typed.WriteShareGroupStateResponsePartitionResult] = []
        for part in topic.partitions:
            code: int = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            if allowed:
                snapshot = ShareSnapshot(part.state_epoch, part.start_offset,
                                         [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                          for b in part.state_batches], part.leader_epoch)
                code = (ErrorCode.INVALID_REQUEST if part.start_offset < 0 else
                        await store.write((request.group_id, topic.topic_id, part.partition), snapshot))
            rows.append({"partition": part.partition, "error_code": code, "error_message": None})
        results.append({"topic_id": topic.topic_id, "partitions": rows})
    return {"results": results}
