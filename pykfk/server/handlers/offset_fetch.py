"""OffsetFetch (key 9): COORDINATOR_NOT_AVAILABLE (group-level from v2) for now."""

from __future__ import annotations

from typing import Any

from pykfk.server.handlers._groups import COORDINATOR_NOT_AVAILABLE

API_KEY = 9
VERSIONS = (1, 3)


async def handle(ctx: Any, request: Any) -> dict:
    topics = request.topics or []
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": index,
                        "committed_offset": -1,
                        "metadata": "",
                        "error_code": COORDINATOR_NOT_AVAILABLE,
                    }
                    for index in topic.partition_indexes
                ],
            }
            for topic in topics
        ],
        "error_code": COORDINATOR_NOT_AVAILABLE,
    }
