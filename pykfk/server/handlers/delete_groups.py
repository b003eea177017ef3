"""DeleteGroups (key 42): delete empty groups and their committed offsets, or an empty
share group and its delivery state.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import DeleteGroupsRequest, DeleteGroupsResponse
from pykfk.protocol.typed import DeleteGroupsResponseDeletableGroupResult as DeletableGroupResult
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation
from pykfk.server import share_groups
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed

API_KEY = 42
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    denied = [g for g in request.groups_names if not group_allowed(ctx, Operation.DELETE, g)]
    shared = [g for g in request.groups_names if g not in denied and share_groups.is_share_group(ctx, g)]
    if shared:  # share groups (KIP-932) are deleted by their own coordinator
        request = replaced(request, groups_names=[g for g in request.groups_names if g not in shared])
        body = await handle(ctx, request)
        deleted: list[DeletableGroupResult] = [
            {"group_id": g, "error_code": await share_groups.delete_group(ctx, g)} for g in shared]
        body["results"] = [*body.get("results", ()), *deleted]
        return body
    if not denied:
        return await api.delete_groups(ctx.broker.group_coordinator, ctx.api_version, request)
    allowed = replaced(request, groups_names=[g for g in request.groups_names if g not in denied])
    body = await api.delete_groups(ctx.broker.group_coordinator, ctx.api_version, allowed)
    refused: list[DeletableGroupResult] = [
        {"group_id": g, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED} for g in denied]
    body["results"] = [*body.get("results", ()), *refused]
    return body
