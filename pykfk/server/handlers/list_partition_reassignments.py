"""ListPartitionReassignments (key 46): the moves in progress, with the full replica set
and the replicas being added and removed (KIP-455); a null topic list names every one,
and a requested partition that is not moving is left out. DESCRIBE on the cluster is
needed; brokers other than the controller answer NOT_CONTROLLER."""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext

API_KEY = 46
VERSIONS = (0, 0)


def _error_body(code: ErrorCode, message: str | None) -> typed.ListPartitionReassignmentsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "topics": []}


async def handle(ctx: RequestContext, request: typed.ListPartitionReassignmentsRequest) -> typed.ListPartitionReassignmentsResponse:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE):
        return _error_body(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
    requested = None
    if request.topics is not None:
        requested = [(t.name, p) for t in request.topics for p in t.partition_indexes]
    try:
        ongoing = await ctx.broker.cluster.list_partition_reassignments(requested, request.timeout_ms / 1000)
    except KafkaError as exc:
        return _error_body(exc.code, exc.message)
    by_topic: dict[str, list[typed.ListPartitionReassignmentsResponseOngoingPartitionReassignment]] = {}
    for (topic, partition), moving in sorted(ongoing.items()):
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "replicas": list(moving.replicas),
            "adding_replicas": list(moving.adding), "removing_replicas": list(moving.removing)})
    body = _error_body(ErrorCode.NONE, None)
    body["topics"] = [{"name": t, "partitions": parts} for t, parts in by_topic.items()]
    return body
