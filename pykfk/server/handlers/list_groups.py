"""ListGroups (key 16): the groups this broker coordinates.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from typing import Any

from pykfk.group import api
from pykfk.protocol.types import Struct
from pykfk.server.dispatch import RequestContext

API_KEY = 16
VERSIONS = (0, 2)


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    return await api.list_groups(ctx.broker.group_coordinator, ctx.api_version, request)
