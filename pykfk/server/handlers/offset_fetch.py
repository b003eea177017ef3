"""OffsetFetch (key 9): a group's committed offsets.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import OffsetFetchRequest, OffsetFetchResponse
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import (
    fetch_denied_topics,
    group_allowed,
    topics_denied,
)

API_KEY = 9
VERSIONS = (0, 7)


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    if not group_allowed(ctx, Operation.DESCRIBE, request.group_id):
        if ctx.api_version >= 2:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []}
        return {"topics": fetch_denied_topics(request, {t.name for t in request.topics or ()},
                                              ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    if request.topics is None:  # every committed topic: leave out those the principal may not see
        body = await api.offset_fetch(ctx.broker.group_coordinator, ctx.api_version, request)
        hidden = topics_denied(ctx, Operation.DESCRIBE, (t["name"] for t in body.get("topics", [])))
        body["topics"] = [t for t in body.get("topics", []) if t["name"] not in hidden]
        return body
    denied = topics_denied(ctx, Operation.DESCRIBE, (t.name for t in request.topics))
    if not denied:
        return await api.offset_fetch(ctx.broker.group_coordinator, ctx.api_version, request)
    body = await api.offset_fetch(ctx.broker.group_coordinator, ctx.api_version, replaced(request, topics=[t for t in request.topics if t.name not in denied]))
    body["topics"] = [*body.get("topics", ()), *fetch_denied_topics(request, denied)]
    return body
