"""AlterConfigs (key 33): a topic's overrides, or a broker's dynamic settings, become
exactly the given set (a null value leaves that key at its default)."""

from __future__ import annotations

from collections.abc import Mapping

from pykfk.config import ConfigKey, TopicKey
from pykfk.protocol import typed
from pykfk.server.config_changes import alter_resources
from pykfk.server.dispatch import RequestContext

API_KEY = 33
VERSIONS = (0, 2)


def _replacement(resource: typed.AlterConfigsResource, _current: dict[str, str],
                 _keys: Mapping[str, ConfigKey | TopicKey]) -> dict[str, str]:
    return {c.name: c.value for c in resource.configs if c.value is not None}


async def handle(ctx: RequestContext, request: typed.AlterConfigsRequest) -> typed.AlterConfigsResponse:
    responses = await alter_resources(ctx, request.resources, request.validate_only, _replacement)
    return {"throttle_time_ms": 0, "responses": responses}
