"""ListGroups (key 16): the groups this broker coordinates.

The group coordinator (``pykfk.group``) does the work; ``pykfk.group.api`` shapes the
response for every version.
"""

from __future__ import annotations

from typing import Any

from pykfk.group import api

API_KEY = 16
VERSIONS = (0, 2)


async def handle(ctx: Any, request: Any) -> dict:
    return await api.list_groups(ctx.broker.group_coordinator, ctx.api_version, request)
