"""ShareGroupHeartbeat (key 76): share-group members (KIP-932) join, heartbeat and leave;
the coordinator answers with their epoch and the partitions they may fetch from
(``pykfk.group.share.coordinator``: Kafka's simple assignor, server side).

Kafka's checks: READ on the group (GROUP_AUTHORIZATION_FAILED), DESCRIBE on every
subscribed topic (TOPIC_AUTHORIZATION_FAILED), NOT_COORDINATOR on a broker that is not
the group's coordinator."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed, topics_denied
from pykfk.server.handlers.consumer_group_heartbeat import catalog
from pykfk.server.share_groups import now_ms, share_coordinator

API_KEY = 76
VERSIONS = (1, 1)


def _error(code: int, message: str | None = None) -> typed.ShareGroupHeartbeatResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


def handle(ctx: RequestContext, request: typed.ShareGroupHeartbeatRequest) -> typed.ShareGroupHeartbeatResponse:
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if topics_denied(ctx, Operation.DESCRIBE, request.subscribed_topic_names or ()):
        return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if request.group_id and not ctx.broker.group_coordinator.owns(request.group_id):
        return _error(ErrorCode.NOT_COORDINATOR)
    topics = catalog(ctx.broker.metadata).topics()
    coordinator = share_coordinator(ctx)
    answer = coordinator.heartbeat(
        request.group_id, request.member_id, request.member_epoch, request.subscribed_topic_names,
        {name: count for name, (_id, count) in topics.items()}, now_ms(ctx), request.rack_id,
        ctx.client_id or "", ctx.client_host)
    if answer.error:
        return _error(answer.error, answer.message)
    assignment: typed.ShareGroupHeartbeatResponseAssignment | None = None
    if answer.assignment is not None:
        assignment = {"topic_partitions": [{"topic_id": topics[name][0], "partitions": partitions}
                                           for name, partitions in sorted(answer.assignment.items())
                                           if name in topics]}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "member_id": answer.member_id, "member_epoch": answer.epoch,
            "heartbeat_interval_ms": coordinator.settings.heartbeat_interval_ms, "assignment": assignment}
