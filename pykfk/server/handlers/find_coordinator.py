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
VERSIONS = (0, 1)  # the clients research matrix (protocol-clients.md section 9)


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    if request.key_type == api.KEY_TYPE_GROUP:
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, request.key):
            return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                    "error_message": "Authorization failed.", "node_id": -1, "host": "", "port": -1}
        await ctx.broker.ensure_offsets_topic()
    return await api.find_coordinator(
        ctx.broker.group_coordinator, ctx.api_version, request,
        node_for_partition=functools.partial(_node_for_partition, ctx),
    )


def _node_for_partition(ctx: RequestContext, partition: int) -> tuple[int, str, int] | None:
    return ctx.broker.coordinator_node(partition, ctx.session.listener_name)
