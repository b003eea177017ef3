"""ReadShareGroupState (key 84): a share-partition leader on another broker reads the
state of a share partition from this broker, its share coordinator
(``pykfk.server.share_state``). ClusterAction on the cluster, as for the other
inter-broker APIs; NOT_COORDINATOR when this broker does not lead the state partition.
A share partition without state answers start offset -1."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.share_state import persister_of

API_KEY = 84
VERSIONS = (0, 0)


async def handle(ctx: RequestContext, request: typed.ReadShareGroupStateRequest
                 ) -> typed.ReadShareGroupStateResponse:
    allowed = ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    store = persister_of(ctx.broker).store
    results: list[typed.ReadShareGroupStateResponseReadStateResult] = []
    for topic in request.topics:
        rows: list[typed.ReadShareGroupStateResponsePartitionResult] = []
        for part in topic.partitions:
            code, found = ((ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None) if not allowed else
                           store.read((request.group_id, topic.topic_id, part.partition), part.leader_epoch))
            row: typed.ReadShareGroupStateResponsePartitionResult = {
                "partition": part.partition, "error_code": code, "error_message": None,
                "state_epoch": 0, "start_offset": -1, "state_batches": []}
            if found is not None:
                row["state_epoch"], row["start_offset"] = found.state_epoch, found.start_offset
                row["state_batches"] = [{"first_offset": f, "last_offset": last, "delivery_state": s,
                                         "delivery_count": c} for f, last, s, c in found.batches]
            rows.append(row)
        results.append({"topic_id": topic.topic_id, "partitions": rows})
    return {"results": results}
