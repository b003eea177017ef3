"""ShareGroupDescribe (key 77): share groups (KIP-932) with their state, epochs, members
and assignments. DESCRIBE on the group (GROUP_AUTHORIZATION_FAILED); a group that is not
a share group, or none, is GROUP_ID_NOT_FOUND as Kafka answers."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed
from pykfk.server.handlers.consumer_group_heartbeat import catalog
from pykfk.server.share_groups import share_coordinator

API_KEY = 77
VERSIONS = (1, 1)

# Kafka's operations on a group: READ, DESCRIBE, DELETE (bits of AclOperation codes).
_GROUP_OPERATIONS = (1 << 3) | (1 << 8) | (1 << 6)


def _group(ctx: RequestContext, group_id: str, include_operations: bool) -> typed.ShareGroupDescribeResponseDescribedGroup:
    empty: typed.ShareGroupDescribeResponseDescribedGroup = {
        "group_id": group_id, "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1,
        "assignor_name": "", "members": []}
    if not group_allowed(ctx, Operation.DESCRIBE, group_id):
        return {**empty, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if not ctx.broker.group_coordinator.owns(group_id):
        return {**empty, "error_code": ErrorCode.NOT_COORDINATOR}
    group = share_coordinator(ctx).groups.get(group_id)
    if group is None:
        return {**empty, "error_code": ErrorCode.GROUP_ID_NOT_FOUND,
                "error_message": f"Group {group_id} not found."}
    topics = catalog(ctx.broker.metadata).topics()
    members: list[typed.ShareGroupDescribeResponseMember] = [{
        "member_id": m.member_id, "rack_id": m.rack_id, "member_epoch": m.epoch, "client_id": m.client_id,
        "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed),
        "assignment": {"topic_partitions": [
            {"topic_id": topics[name][0], "topic_name": name, "partitions": parts}
            for name, parts in sorted(m.assignment.items()) if name in topics]},
    } for m in group.members.values()]
    return {"error_code": ErrorCode.NONE, "error_message": None, "group_id": group_id, "group_state": group.state,
            "group_epoch": group.epoch, "assignment_epoch": group.assignment_epoch, "assignor_name": "simple",
            "members": members, "authorized_operations": _GROUP_OPERATIONS if include_operations else -2147483648}


def handle(ctx: RequestContext, request: typed.ShareGroupDescribeRequest) -> typed.ShareGroupDescribeResponse:
    return {"throttle_time_ms": 0,
            "groups": [_group(ctx, g, request.include_authorized_operations) for g in request.group_ids]}
