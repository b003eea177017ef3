"""AlterPartitionReassignments (key 45): start moving partitions to new replica sets,
or cancel a move (null replicas), through the controller (KIP-455). The answer comes
once the move is recorded; the data moves afterwards (ListPartitionReassignments
shows it). ALTER on the cluster is needed; brokers other than the controller answer
NOT_CONTROLLER."""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext

API_KEY = 45
VERSIONS = (0, 1)


def _error_body(request: typed.AlterPartitionReassignmentsRequest, code: ErrorCode,
                message: str | None) -> typed.AlterPartitionReassignmentsResponse:
    return {"throttle_time_ms": 0, "allow_replication_factor_change": request.allow_replication_factor_change,
            "error_code": code, "error_message": message, "responses": []}


async def handle(ctx: RequestContext, request: typed.AlterPartitionReassignmentsRequest) -> typed.AlterPartitionReassignmentsResponse:
    if not ctx.allowed_on_cluster(Operation.ALTER):
        return _error_body(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
    targets = {(t.name, p.partition_index): None if p.replicas is None else list(p.replicas)
               for t in request.topics for p in t.partitions}
    allow_factor_change = ctx.api_version < 1 or bool(request.allow_replication_factor_change)
    try:
        outcomes = await ctx.broker.cluster.alter_partition_reassignments(
            targets, allow_factor_change, request.timeout_ms / 1000)
    except KafkaError as exc:
        return _error_body(request, exc.code, exc.message)
    by_topic: dict[str, list[typed.AlterPartitionReassignmentsResponseReassignablePartitionResponse]] = {}
    for (topic, partition), error in outcomes.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "error_code": ErrorCode.NONE if error is None else error.code,
            "error_message": None if error is None else error.message,
        })
    body = _error_body(request, ErrorCode.NONE, None)
    body["responses"] = [{"name": t, "partitions": parts} for t, parts in by_topic.items()]
    return body
