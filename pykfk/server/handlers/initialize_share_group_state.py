"""InitializeShareGroupState (key 83): a share group's state of share partitions set
before any delivery (start offset, state epoch, nothing in flight) at this broker, their
share coordinator. The state epoch must not be older than the stored one
(FENCED_STATE_EPOCH); NOT_COORDINATOR when this broker does not lead the state
partition; ClusterAction on the cluster."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.group.share.state_records import ShareSnapshot
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.share_state import NO_LEADER_EPOCH, ShareKey, each_partition, persister_of

API_KEY = 83
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: typed.InitializeShareGroupStateRequest
                 ) -> typed.InitializeShareGroupStateResponse:
    store = persister_of(ctx.broker).store

    async def initialize(key: ShareKey, part: Any) -> int:
        code, found = store.read(key, NO_LEADER_EPOCH)
        if code != ErrorCode.NONE:
            return code
        if part.start_offset < 0:
            return ErrorCode.INVALID_REQUEST
        if found is not None and part.state_epoch < found.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        leader_epoch = max(found.leader_epoch if found is not None else 0, 0)  # not an administrator's write
        return await store.write(key, ShareSnapshot(part.state_epoch, part.start_offset, [], leader_epoch))

    answers = await each_partition(request.group_id, request.topics,
                                   ctx.allowed_on_cluster(Operation.CLUSTER_ACTION), initialize)
    return {"results": [{"topic_id": topic_id, "partitions": [
        {"partition": p, "error_code": code, "error_message": None} for p, code in rows]}
        for topic_id, rows in answers]}
