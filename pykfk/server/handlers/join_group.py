"""JoinGroup (key 11): COORDINATOR_NOT_AVAILABLE until the group coordinator exists."""

from __future__ import annotations

from typing import Any

from pykfk.server.handlers._groups import simple_error

API_KEY = 11
VERSIONS = (0, 5)


async def handle(ctx: Any, request: Any) -> dict:
    body = simple_error()
    body.update(generation_id=-1, protocol_name="", leader="", member_id=request.member_id, members=[])
    return body
