"""OffsetCommit (key 8): COORDINATOR_NOT_AVAILABLE for every partition for now."""

from __future__ import annotations

from typing import Any

from pykfk.server.handlers._groups import COORDINATOR_NOT_AVAILABLE

API_KEY = 8
VERSIONS = (2, 3)


async def handle(ctx: Any, request: Any) -> dict:
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": COORDINATOR_NOT_AVAILABLE}
                    for p in topic.partitions
                ],
            }
            for topic in request.topics
        ],
    }
