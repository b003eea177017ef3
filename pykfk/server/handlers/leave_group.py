"""LeaveGroup (key 13): a member leaves; the group rebalances.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import LeaveGroupRequest, LeaveGroupResponse
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed

API_KEY = 13
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    return await api.leave_group(ctx.broker.group_coordinator, ctx.api_version, request)
