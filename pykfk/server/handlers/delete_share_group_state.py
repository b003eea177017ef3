"""DeleteShareGroupState (key 86): the coordinator of a share group on another broker
drops the group's state of share partitions kept by this broker, their share
coordinator (a tombstone in ``__share_group_state``). NOT_COORDINATOR when this broker
does not lead the state partition; ClusterAction on the cluster."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.share_state import persister_of

API_KEY = 86
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: typed.DeleteShareGroupStateRequest
                 ) -> typed.DeleteShareGroupStateResponse:
    allowed = ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    store = persister_of(ctx.broker).store
    results: list[typed.DeleteShareGroupStateResponseDeleteStateResult] = []
    for topic in request.topics:
        rows: list[typed.DeleteShareGroupStateResponsePartitionResult] = []
        for part in topic.partitions:
            code: int = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            if allowed:
                code = await store.write((request.group_id, topic.topic_id, part.partition), None)
            rows.append({"partition": part.partition, "error_code": code, "error_message": None})
        results.append({"topic_id": topic.topic_id, "partitions": rows})
    return {"results": results}
