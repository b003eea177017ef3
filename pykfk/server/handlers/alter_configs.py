"""AlterConfigs (key 33): a topic's overrides, or a broker's dynamic settings, become
exactly the given set (a null value leaves that key at its default)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pykfk.protocol.types import Struct
from pykfk.server.config_changes import alter_resources
from pykfk.server.dispatch import RequestContext

API_KEY = 33
VERSIONS = (0, 2)


def _replacement(resource: Struct, _current: dict[str, str], _keys: Mapping[str, Any]) -> dict[str, str]:
    return {c.name: c.value for c in resource.configs if c.value is not None}


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    responses = await alter_resources(ctx, list(request.resources), request.validate_only, _replacement)
    return {"throttle_time_ms": 0, "responses": responses}
