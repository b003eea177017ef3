"""ListGroups (key 16): no coordinator, so no groups (an empty, successful answer lets
admin tools list groups without error)."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode

API_KEY = 16
VERSIONS = (0, 2)


async def handle(ctx: Any, request: Any) -> dict:
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "groups": []}
