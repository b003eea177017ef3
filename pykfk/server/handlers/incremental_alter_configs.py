"""IncrementalAlterConfigs (key 44, KIP-339): SET or DELETE single topic overrides or
dynamic broker settings, APPEND to or SUBTRACT from list settings (cleanup.policy);
other settings stay as they are. For topics INVALID_CONFIG for an unknown key or
APPEND/SUBTRACT on a non-list setting, INVALID_REQUEST for a key named twice or a SET
without a value (broker resources answer INVALID_REQUEST for all of these)."""

from __future__ import annotations

from collections.abc import Mapping

from pykfk.config import ConfigKey, TopicKey
from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.server.config_changes import alter_resources
from pykfk.server.dispatch import RequestContext

API_KEY = 44
VERSIONS = (0, 1)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _items(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def _changed(resource: typed.IncrementalAlterConfigsRequestAlterConfigsResource, current: dict[str, str],
             keys: Mapping[str, ConfigKey | TopicKey]) -> dict[str, str]:
    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "A config is named more than once")
    configs = dict(current)
    for change in resource.configs:
        key = keys.get(change.name)
        if key is None:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {change.name}")
        if change.config_operation == SET:
            if change.value is None:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Null value not supported for SET of {change.name}")
            configs[change.name] = change.value
        elif change.config_operation == DELETE:
            configs.pop(change.name, None)
        elif change.config_operation in (APPEND, SUBTRACT):
            if key.kind != "list":
                raise KafkaError(ErrorCode.INVALID_CONFIG,
                                 f"Config {change.name} is not a list: APPEND and SUBTRACT need one")
            items = _items(configs.get(change.name)) or _items(",".join(key.default or []))
            given = _items(change.value)
            items = items + [i for i in given if i not in items] if change.config_operation == APPEND else [
                i for i in items if i not in given]
            configs[change.name] = ",".join(items)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unknown config operation {change.config_operation}")
    return configs


async def handle(ctx: RequestContext, request: typed.IncrementalAlterConfigsRequest) -> typed.IncrementalAlterConfigsResponse:
    responses = await alter_resources(ctx, request.resources, request.validate_only, _changed)
    return {"throttle_time_ms": 0, "responses": responses}
