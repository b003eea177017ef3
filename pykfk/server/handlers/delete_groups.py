"""DeleteGroups (key 42): COORDINATOR_NOT_AVAILABLE per group for now."""

from __future__ import annotations

from typing import Any

from pykfk.server.handlers._groups import COORDINATOR_NOT_AVAILABLE

API_KEY = 42
VERSIONS = (0, 1)


async def handle(ctx: Any, request: Any) -> dict:
    return {
        "throttle_time_ms": 0,
        "results": [{"group_id": g, "error_code": COORDINATOR_NOT_AVAILABLE} for g in request.groups_names],
    }
