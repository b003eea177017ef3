"""FindCoordinator (key 10): no group or transaction coordinator on this broker yet."""

from __future__ import annotations

from typing import Any

from pykfk.server.handlers._groups import COORDINATOR_NOT_AVAILABLE, MESSAGE

API_KEY = 10
VERSIONS = (0, 2)


async def handle(ctx: Any, request: Any) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": COORDINATOR_NOT_AVAILABLE,
        "error_message": MESSAGE,
        "node_id": -1,
        "host": "",
        "port": -1,
    }
