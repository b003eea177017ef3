"""ListGroups (key 16): the groups this broker coordinates, share groups (KIP-932) with
protocol type and group type "share".

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from pykfk.group import api
from pykfk.protocol.typed import ListGroupsRequest, ListGroupsResponse
from pykfk.security.acl import Operation
from pykfk.server import share_groups
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed

API_KEY = 16
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    body = await api.list_groups(ctx.broker.group_coordinator, ctx.api_version, request)
    body["groups"] = list(body.get("groups", ())) + share_groups.listed(ctx, request.states_filter,
                                                                        request.types_filter)
    if ctx.broker.authorizer is not None and not ctx.allowed_on_cluster(Operation.DESCRIBE):
        body["groups"] = [g for g in body.get("groups", ()) if group_allowed(ctx, Operation.DESCRIBE, g["group_id"])]
    return body
