"""ApiVersions (key 18): the API ranges of the dispatch registry (KIP-35, KIP-511).

An unsupported version never reaches this handler: the dispatcher answers it with the
v0-layout UNSUPPORTED_VERSION fallback.
"""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode

API_KEY = 18
VERSIONS = (0, 3)


async def handle(ctx: Any, request: Any) -> dict:
    registry = ctx.broker.server.dispatcher.registry
    return {"error_code": ErrorCode.NONE, "api_keys": registry.api_versions(), "throttle_time_ms": 0}
