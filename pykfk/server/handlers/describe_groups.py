"""DescribeGroups (key 15): state, protocol, members and assignments of groups.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version. Consumer-protocol and share groups are not classic groups:
Dead with no members (v0-5), GROUP_ID_NOT_FOUND "Group <id> is not a classic group." (v6+),
as Kafka answers.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import DescribeGroupsRequest, DescribeGroupsResponse
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed
from pykfk.server.share_groups import is_share_group

API_KEY = 15
VERSIONS = (0, 6)


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    denied = [g for g in request.groups if not group_allowed(ctx, Operation.DESCRIBE, g)]
    if not denied:
        return _share_groups_marked(ctx, await api.describe_groups(ctx.broker.group_coordinator, ctx.api_version,
                                                                   request))
    allowed = replaced(request, groups=[g for g in request.groups if g not in denied])
    body = _share_groups_marked(ctx, await api.describe_groups(ctx.broker.group_coordinator, ctx.api_version,
                                                               allowed))
    described = {g["group_id"]: g for g in body.get("groups", ())}
    body["groups"] = [described.get(g) or {"group_id": g, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                           "members": []} for g in request.groups]
    return body


def _share_groups_marked(ctx: RequestContext, body: DescribeGroupsResponse) -> DescribeGroupsResponse:
    """A share group is described as Kafka describes it here: not a classic group."""
    for entry in body.get("groups", ()):
        if is_share_group(ctx, entry["group_id"]):
            entry.update(api.not_classic(entry["group_id"], ctx.api_version))
    return body
