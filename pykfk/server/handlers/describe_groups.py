"""DescribeGroups (key 15): COORDINATOR_NOT_AVAILABLE per group for now."""

from __future__ import annotations

from typing import Any

from pykfk.server.handlers._groups import COORDINATOR_NOT_AVAILABLE

API_KEY = 15
VERSIONS = (0, 3)


async def handle(ctx: Any, request: Any) -> dict:
    return {
        "throttle_time_ms": 0,
        "groups": [
            {
                "error_code": COORDINATOR_NOT_AVAILABLE,
                "group_id": group_id,
                "group_state": "",
                "protocol_type": "",
                "protocol_data": "",
                "members": [],
            }
            for group_id in request.groups
        ],
    }
