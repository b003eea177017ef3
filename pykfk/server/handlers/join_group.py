"""JoinGroup (key 11): join a group; parked until the rebalance completes.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import JoinGroupRequest, JoinGroupResponse
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed

API_KEY = 11
VERSIONS = (0, 9)


async def handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    return await api.join_group(
        ctx.broker.group_coordinator,
        ctx.api_version,
        request,
        client_id=ctx.client_id,
        client_host="/" + ctx.client_host.rpartition(":")[0],  # Kafka shows "/127.0.0.1"
    )
