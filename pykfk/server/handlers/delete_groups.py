"""DeleteGroups (key 42): delete empty groups and their committed offsets.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from typing import Any

from pykfk.group import api
from pykfk.protocol.types import Struct
from pykfk.server.dispatch import RequestContext

API_KEY = 42
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    return await api.delete_groups(ctx.broker.group_coordinator, ctx.api_version, request)
