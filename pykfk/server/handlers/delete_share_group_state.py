"""DeleteShareGroupState (key 86): the coordinator of a share group on another broker
drops the group's state of share partitions kept by this broker, their share
coordinator (a tombstone in ``__share_group_state``). NOT_COORDINATOR when this broker
does not lead the state partition; ClusterAction on the cluster."""

from __future__ import annotations

from typing import Any

from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.share_state import ShareKey, each_partition, persister_of

API_KEY = 86
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: typed.DeleteShareGroupStateRequest
                 ) -> typed.DeleteShareGroupStateResponse:
    store = persister_of(ctx.broker).store

    async def delete(key: ShareKey, _part: Any) -> int:
        return await store.write(key, None)

    answers = await each_partition(request.group_id, request.topics,
                                   ctx.allowed_on_cluster(Operation.CLUSTER_ACTION), delete)
    return {"results": [{"topic_id": topic_id, "partitions": [
        {"partition": p, "error_code": code, "error_message": None} for p, code in rows]}
        for topic_id, rows in answers]}
