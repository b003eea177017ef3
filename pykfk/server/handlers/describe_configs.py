"""DescribeConfigs (key 32): topic and broker settings with their sources (KIP-226).

Topic resources list every topic-level setting: the topic's override (source
DYNAMIC_TOPIC_CONFIG) or the value the broker config gives it (STATIC_BROKER_CONFIG when
set in server.properties/--override, DEFAULT_CONFIG otherwise). Broker resources list
the broker settings; they are read-only (no dynamic broker config yet).
"""

from __future__ import annotations

from typing import Any

from pykfk.config import BROKER_KEYS, CONFIG_TYPE_CODES, TOPIC_KEYS, format_config_value
from pykfk.errors import ErrorCode

API_KEY = 32
VERSIONS = (0, 2)

TOPIC = 2
BROKER = 4
# ConfigSource codes (DescribeConfigsResponse.json)
DYNAMIC_TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5

# Broker keys whose explicit setting feeds a derived topic default.
_RELATED_BROKER_KEYS = {
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
}


def _entry(name: str, value: str | None, source: int, read_only: bool, synonyms: list[Any], kind: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": synonyms,
        "config_type": CONFIG_TYPE_CODES.get(kind, 0),
    }


def _topic_configs(broker: Any, info: Any, keys: Any, with_synonyms: bool) -> list[dict[str, Any]]:
    config = broker.config
    defaults = config.topic_defaults()
    out = []
    for name, key in TOPIC_KEYS.items():
        if keys is not None and name not in keys:
            continue
        synonym_name = key.broker_synonym or name
        related = _RELATED_BROKER_KEYS.get(name, (synonym_name,))
        broker_source = STATIC_BROKER_CONFIG if any(config.is_explicit(k) for k in related) else DEFAULT_CONFIG
        broker_value = format_config_value(defaults[name])
        synonyms = []
        if name in info.configs:
            value, source = info.configs[name], DYNAMIC_TOPIC_CONFIG
            synonyms.append({"name": name, "value": value, "source": DYNAMIC_TOPIC_CONFIG})
        else:
            value, source = broker_value, broker_source
        synonyms.append({"name": synonym_name, "value": broker_value, "source": broker_source})
        out.append(_entry(name, value, source, False, synonyms if with_synonyms else [], key.kind))
    return out


def _broker_configs(broker: Any, keys: Any, with_synonyms: bool) -> list[dict[str, Any]]:
    config = broker.config
    out = []
    for name, key in BROKER_KEYS.items():
        if keys is not None and name not in keys:
            continue
        source = STATIC_BROKER_CONFIG if config.is_explicit(name) else DEFAULT_CONFIG
        value = format_config_value(config[name])
        synonyms = [{"name": name, "value": value, "source": source}] if with_synonyms else []
        out.append(_entry(name, value, source, True, synonyms, key.kind))
    return out


async def handle(ctx: Any, request: Any) -> dict[str, Any]:
    broker = ctx.broker
    with_synonyms = bool(getattr(request, "include_synonyms", False)) and ctx.api_version >= 1
    results = []
    for resource in request.resources:
        keys = None if resource.configuration_keys is None else set(resource.configuration_keys)
        code, message, configs = ErrorCode.NONE, None, []
        if resource.resource_type == TOPIC:
            info = broker.metadata.get_topic(resource.resource_name)
            if info is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource.resource_name} does not exist"
            else:
                configs = _topic_configs(broker, info, keys, with_synonyms)
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.broker_id)):
                code = ErrorCode.INVALID_REQUEST
                message = f"Unexpected broker id, expected {broker.broker_id} or empty string, but received {resource.resource_name}"
            else:
                configs = _broker_configs(broker, keys, with_synonyms)
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}"
        results.append(
            {
                "error_code": code,
                "error_message": message,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "configs": configs,
            }
        )
    return {"throttle_time_ms": 0, "results": results}
