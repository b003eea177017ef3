"""ConsumerGroupDescribe (key 69): epochs, members and assignments of consumer-protocol
groups (KIP-848); topics are named as well as given by id.

The group coordinator (``pykfk.group.consumer_group``) does the work.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed
from pykfk.server.handlers.consumer_group_heartbeat import catalog

API_KEY = 69
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    denied = {g for g in request.group_ids if not group_allowed(ctx, Operation.DESCRIBE, g)}
    allowed = replaced(request, group_ids=[g for g in request.group_ids if g not in denied])
    body = await api.consumer_group_describe(ctx.broker.group_coordinator, ctx.api_version, allowed,
                                             topic_names=catalog(ctx.broker.metadata).names_by_id())
    described = {g["group_id"]: g for g in body.get("groups", ())}
    body["groups"] = [described.get(g) or {
        "group_id": g, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "group_state": "", "group_epoch": 0,
        "assignment_epoch": 0, "assignor_name": "", "members": []} for g in request.group_ids]
    return body
