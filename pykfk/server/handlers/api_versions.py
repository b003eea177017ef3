"""ApiVersions (key 18): the API ranges of the dispatch registry (KIP-35, KIP-511).

An unsupported version never reaches this handler: the dispatcher answers it with the
v0-layout UNSUPPORTED_VERSION fallback.
"""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.protocol.types import Struct
from pykfk.server.dispatch import RequestContext

API_KEY = 18
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    return {"error_code": ErrorCode.NONE, "api_keys": ctx.registry.api_versions(), "throttle_time_ms": 0}
