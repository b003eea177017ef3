"""JoinGroup (key 11): join a group; parked until the rebalance completes.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from typing import Any

from pykfk.group import api
from pykfk.protocol.types import Struct
from pykfk.server.dispatch import RequestContext

API_KEY = 11
VERSIONS = (0, 5)


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    return await api.join_group(
        ctx.broker.group_coordinator,
        ctx.api_version,
        request,
        client_id=ctx.client_id,
        client_host="/" + ctx.client_host.rpartition(":")[0],  # Kafka shows "/127.0.0.1"
    )
