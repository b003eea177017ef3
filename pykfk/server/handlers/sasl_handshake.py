"""SaslHandshake (key 17): no SASL mechanism is enabled on a PLAINTEXT listener."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.protocol.types import Struct
from pykfk.server.dispatch import RequestContext

API_KEY = 17
VERSIONS = (0, 1)
ENABLED_MECHANISMS: list[str] = []


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    code = ErrorCode.NONE if request.mechanism in ENABLED_MECHANISMS else ErrorCode.UNSUPPORTED_SASL_MECHANISM
    return {"error_code": code, "mechanisms": ENABLED_MECHANISMS}
