"""ApiVersions (key 18): the API ranges of the dispatch registry (KIP-35, KIP-511).

An unsupported version never reaches this handler: the dispatcher answers it with the
v0-layout UNSUPPORTED_VERSION fallback.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.server.dispatch import RequestContext

API_KEY = 18
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: typed.ApiVersionsRequest) -> typed.ApiVersionsResponse:
    return {"error_code": ErrorCode.NONE, "api_keys": ctx.registry.api_versions(), "throttle_time_ms": 0}
