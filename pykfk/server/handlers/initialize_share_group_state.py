"""InitializeShareGroupState (key 83): a share group's state of share partitions set
before any delivery (start offset, state epoch, nothing in flight) at this broker, their
share coordinator. The state epoch must not be older than the stored one
(FENCED_STATE_EPOCH); NOT_COORDINATOR when this broker does not lead the state
partition; ClusterAction on the cluster."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group.share.state_records import ShareSnapshot
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.share_state import persister_of

API_KEY = 83
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: typed.InitializeShareGroupStateRequest
                 ) -> typed.InitializeShareGroupStateResponse:
    allowed = ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    store = persister_of(ctx.broker).store
    results: list[typed.InitializeShareGroupStateResponseInitializeStateResult] = []
    for topic in request.topics:
        rows: list[typed.InitializeShareGroupStateResponsePartitionResult] = []
        for part in topic.partitions:
            code: int = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            if allowed:
                key = (request.group_id, topic.topic_id, part.partition)
                code, found = store.read(key, -1)
                if code == ErrorCode.NONE:
                    if part.start_offset < 0:
                        code = ErrorCode.INVALID_REQUEST
                    elif found is not None and part.state_epoch < found.state_epoch:
                        code = ErrorCode.FENCED_STATE_EPOCH
                    else:
                        leader_epoch = found.leader_epoch if found is not None else -1
                        code = await store.write(key, ShareSnapshot(part.state_epoch, part.start_offset, [],
                                                                    max(leader_epoch, 0)))
            rows.append({"partition": part.partition, "error_code": code, "error_message": None})
        results.append({"topic_id": topic.topic_id, "partitions": rows})
    return {"results": results}
