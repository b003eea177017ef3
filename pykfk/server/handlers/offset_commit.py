"""OffsetCommit (key 8): store a group's offsets in ``__consumer_offsets``.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import OffsetCommitRequest, OffsetCommitResponse
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import (
    commit_denied_body,
    group_allowed,
    topics_denied,
)

API_KEY = 8
VERSIONS = (0, 9)


async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"throttle_time_ms": 0,
                "topics": commit_denied_body(request, ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    denied = topics_denied(ctx, Operation.READ, (t.name for t in request.topics))
    if not denied:
        return await api.offset_commit(ctx.broker.group_coordinator, ctx.api_version, request)
    body = await api.offset_commit(ctx.broker.group_coordinator, ctx.api_version, replaced(request, topics=[t for t in request.topics if t.name not in denied]))
    body["topics"] = [*body.get("topics", ()), *commit_denied_body(
        request, ErrorCode.TOPIC_AUTHORIZATION_FAILED, denied)]
    return body
