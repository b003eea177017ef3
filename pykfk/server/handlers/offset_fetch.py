"""OffsetFetch (key 9): a group's committed offsets; from v8 several groups' at once.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version. DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED, per
group from v8) and on each topic named (else TOPIC_AUTHORIZATION_FAILED for its
partitions); a request for every topic (null topics) leaves out those the principal may
not describe. v9 members of consumer-protocol groups are checked by the coordinator.
"""

from __future__ import annotations

from collections.abc import Sequence

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol import typed
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
VERSIONS = (0, 9)


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    if ctx.api_version >= 8:
        return {"throttle_time_ms": 0, "groups": await _fetch_groups(ctx, request)}
    if not group_allowed(ctx, Operation.DESCRIBE, request.group_id):
        if ctx.api_version >= 2:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []}
        return {"topics": fetch_denied_topics(request.topics or (), {t.name for t in request.topics or ()},
                                              ErrorCode.GROUP_AUTHORIZATION_FAILED)}
    if request.topics is None:  # every committed topic: leave out those the principal may not see
        body = await api.offset_fetch(ctx.broker.group_coordinator, ctx.api_version, request)
        body["topics"] = _visible(ctx, body.get("topics", []))
        return body
    denied = topics_denied(ctx, Operation.DESCRIBE, (t.name for t in request.topics))
    if not denied:
        return await api.offset_fetch(ctx.broker.group_coordinator, ctx.api_version, request)
    body = await api.offset_fetch(ctx.broker.group_coordinator, ctx.api_version, replaced(request, topics=[t for t in request.topics if t.name not in denied]))
    body["topics"] = [*body.get("topics", ()), *fetch_denied_topics(request.topics, denied)]
    return body


def _visible(ctx: RequestContext, topics: Sequence[typed.OffsetFetchResponseTopic]
             ) -> list[typed.OffsetFetchResponseTopic]:
    hidden = topics_denied(ctx, Operation.DESCRIBE, (t["name"] for t in topics))
    return [t for t in topics if t["name"] not in hidden]


async def _fetch_groups(ctx: RequestContext, request: OffsetFetchRequest) -> list[typed.OffsetFetchResponseGroup]:
    """v8+: each group answered on its own, with its own authorization."""
    denied_topics: dict[str, set[str]] = {}

    def topics_of(group: typed.OffsetFetchRequestGroup) -> list[tuple[str, list[int]]] | None:
        if group.topics is None:
            return None
        denied = denied_topics[group.group_id] = topics_denied(ctx, Operation.DESCRIBE, (t.name for t in group.topics))
        return [(t.name, list(t.partition_indexes)) for t in group.topics if t.name not in denied]

    allowed = [g for g in request.groups if group_allowed(ctx, Operation.DESCRIBE, g.group_id)]
    answered = {g["group_id"]: g for g in await api.offset_fetch_groups(
        ctx.broker.group_coordinator, replaced(request, groups=allowed), topics_of)}
    out: list[typed.OffsetFetchResponseGroup] = []
    for group in request.groups:
        entry = answered.get(group.group_id)
        if entry is None:
            out.append({"group_id": group.group_id, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "topics": []})
            continue
        if entry["error_code"] == ErrorCode.NONE:
            if group.topics is None:
                entry["topics"] = _visible(ctx, entry["topics"])
            elif denied_topics.get(group.group_id):
                entry["topics"] = [*entry["topics"],
                                   *fetch_denied_topics(group.topics, denied_topics[group.group_id])]
        out.append(entry)
    return out
