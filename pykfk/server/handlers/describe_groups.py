"""DescribeGroups (key 15): state, protocol, members and assignments of groups.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import DescribeGroupsRequest, DescribeGroupsResponse
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed

API_KEY = 15
VERSIONS = (0, 6)


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    denied = [g for g in request.groups if not group_allowed(ctx, Operation.DESCRIBE, g)]
    if not denied:
        return await api.describe_groups(ctx.broker.group_coordinator, ctx.api_version, request)
    allowed = replaced(request, groups=[g for g in request.groups if g not in denied])
    body = await api.describe_groups(ctx.broker.group_coordinator, ctx.api_version, allowed)
    described = {g["group_id"]: g for g in body.get("groups", ())}
    body["groups"] = [described.get(g) or {"group_id": g, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                           "members": []} for g in request.groups]
    return body
