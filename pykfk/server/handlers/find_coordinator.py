"""FindCoordinator (key 10): the broker leading the group's ``__consumer_offsets`` partition.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

import functools
from typing import Any

from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.types import Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 10
# v0-1 are what older librdkafka needs in the range; v4 batches keys.
VERSIONS = (0, 4)


DENIED = {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": "Authorization failed.",
          "node_id": -1, "host": "", "port": -1}


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    keys = [request.key] if ctx.api_version < 4 else list(request.coordinator_keys)
    denied = set()
    if request.key_type == api.KEY_TYPE_GROUP:
        denied = {key for key in keys if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, key)}
        if ctx.api_version < 4 and denied:
            return {"throttle_time_ms": 0, **DENIED}
        if len(denied) < len(keys):
            await ctx.broker.ensure_offsets_topic()
    if denied:
        request = Struct(request)
        request["coordinator_keys"] = [key for key in keys if key not in denied]
    body = await api.find_coordinator(
        ctx.broker.group_coordinator, ctx.api_version, request,
        node_for_partition=functools.partial(_node_for_partition, ctx),
    )
    if denied:
        body["coordinators"] = list(body["coordinators"]) + [{"key": key, **DENIED} for key in keys if key in denied]
    return body


def _node_for_partition(ctx: RequestContext, partition: int) -> tuple[int, str, int] | None:
    return ctx.broker.coordinator_node(partition, ctx.session.listener_name)
