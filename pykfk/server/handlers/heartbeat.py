"""Heartbeat (key 12): COORDINATOR_NOT_AVAILABLE until the group coordinator exists."""

from __future__ import annotations

from typing import Any

from pykfk.server.handlers._groups import simple_error

API_KEY = 12
VERSIONS = (0, 3)


async def handle(ctx: Any, request: Any) -> dict:
    return simple_error()
