"""DescribeConfigs (key 32): topic and broker settings with their sources (KIP-226), all
read from the one declaration of settings (``pykfk.config``).

A topic setting's value is the topic's override (source DYNAMIC_TOPIC_CONFIG) or the
default its broker synonyms give: set dynamically for this broker
(DYNAMIC_BROKER_CONFIG) or for all (DYNAMIC_DEFAULT_BROKER_CONFIG), in
server.properties/--override (STATIC_BROKER_CONFIG), else DEFAULT_CONFIG; topic
settings are never read-only. Synonyms come in Kafka's order: the topic override, each
broker synonym where it was set (dynamic, dynamic default, static), then the default. A
broker setting is read-only unless it can change at run time; the BROKER resource ""
describes the cluster-wide dynamic default only. v1 adds synonyms and sources, v3 the
type and the documentation.
"""

from __future__ import annotations

from collections.abc import Mapping

from pykfk.cluster.metadata import TopicInfo
from pykfk.config import (
    BROKER_DEFAULTS,
    BROKER_KEYS,
    CONFIG_TYPE_CODES,
    TOPIC_KEYS,
    BrokerConfig,
    TopicKey,
    format_config_value,
)
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server import share_groups, telemetry
from pykfk.server.dispatch import RequestContext

API_KEY = 32
VERSIONS = (0, 4)

TOPIC = 2
BROKER = 4
GROUP = 32
DYNAMIC_GROUP_CONFIG = 8
CLIENT_METRICS_CONFIG = 7
# ConfigSource codes (DescribeConfigsResponse.json)
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5


def _entry(name: str, value: str | None, source: int, read_only: bool, synonyms: list[typed.DescribeConfigsSynonym],
           kind: str, doc: str) -> typed.DescribeConfigsResourceResult:
    sensitive = kind == "password"  # never sent back, as Kafka does
    if sensitive:
        value = None
        synonyms = [{**synonym, "value": None} for synonym in synonyms]
    return {
        "name": name,
        "value": value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == DEFAULT_CONFIG,
        "is_sensitive": sensitive,
        "synonyms": synonyms,
        "config_type": CONFIG_TYPE_CODES.get(kind, 0),
        "documentation": doc,
    }


def _synonym(name: str, value: object, source: int) -> typed.DescribeConfigsSynonym:
    return {"name": name, "value": format_config_value(value), "source": source}


def _set_layers(config: BrokerConfig, name: str) -> list[typed.DescribeConfigsSynonym]:
    """Each place a broker setting was given, highest precedence first."""
    layers = [(config.dynamic_broker, DYNAMIC_BROKER_CONFIG), (config.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
              (config.originals, STATIC_BROKER_CONFIG)]
    return [_synonym(name, values[name], source) for values, source in layers if name in values]


def _topic_entry(config: BrokerConfig, key: TopicKey, overrides: Mapping[str, str]) -> typed.DescribeConfigsResourceResult:
    synonyms: list[typed.DescribeConfigsSynonym] = []
    if key.name in overrides:
        synonyms.append(_synonym(key.name, overrides[key.name], DYNAMIC_TOPIC_CONFIG))
    for name, _factor in key.synonyms:
        synonyms += _set_layers(config, name)
    if key.synonyms:  # a topic-only setting (throttled replicas) has no broker default
        default_name = key.synonym_with_value(BROKER_DEFAULTS)
        synonyms.append(_synonym(default_name, BROKER_DEFAULTS[default_name], DEFAULT_CONFIG))
    source = synonyms[0]["source"] if synonyms else DEFAULT_CONFIG
    value: str | None
    if source == DYNAMIC_TOPIC_CONFIG:
        value = overrides[key.name]
    else:
        value = format_config_value(key.value_from(config.values))
    return _entry(key.name, value, source, False, synonyms, key.kind, key.doc)


def topic_configs(config: BrokerConfig, info: TopicInfo, keys: set[str] | None) -> list[typed.DescribeConfigsResourceResult]:
    return [_topic_entry(config, key, info.configs) for name, key in TOPIC_KEYS.items()
            if keys is None or name in keys]


# Broker settings that are one setting in several units (log.retention.ms / .minutes /
# .hours): each names the whole chain as its synonyms, as Kafka's brokerConfigSynonyms.
_UNIT_CHAINS = {name: [n for n, _factor in key.synonyms]
                for key in TOPIC_KEYS.values() if len({f for _n, f in key.synonyms}) > 1
                for name, _f in key.synonyms}


def _broker_synonyms(config: BrokerConfig, name: str) -> list[typed.DescribeConfigsSynonym]:
    """Where the setting was given, every unit of it, then the defaults that have a value
    (Kafka leaves out a null default: log.retention.ms's synonym is log.retention.hours=168)."""
    chain = _UNIT_CHAINS.get(name, [name])
    synonyms = [layer for n in chain for layer in _set_layers(config, n)]
    synonyms += [_synonym(n, BROKER_DEFAULTS[n], DEFAULT_CONFIG) for n in chain
                 if BROKER_DEFAULTS.get(n) is not None]
    return synonyms or [_synonym(name, None, DEFAULT_CONFIG)]


def _broker_configs(config: BrokerConfig, keys: set[str] | None) -> list[typed.DescribeConfigsResourceResult]:
    out: list[typed.DescribeConfigsResourceResult] = []
    for name, key in BROKER_KEYS.items():
        if keys is not None and name not in keys:
            continue
        synonyms = _broker_synonyms(config, name)
        source = synonyms[0]["source"]
        value = format_config_value(config[name])
        out.append(_entry(name, value, source, not key.dynamic, synonyms, key.kind, key.doc))
    return out


def _cluster_default_configs(config: BrokerConfig, keys: set[str] | None) -> list[typed.DescribeConfigsResourceResult]:
    """The BROKER resource "" is the cluster-wide default: only its dynamic settings."""
    return [_entry(name, value, DYNAMIC_DEFAULT_BROKER_CONFIG, False,
                   [_synonym(name, value, DYNAMIC_DEFAULT_BROKER_CONFIG)], BROKER_KEYS[name].kind, BROKER_KEYS[name].doc)
            for name, value in sorted(config.dynamic_default.items())
            if (keys is None or name in keys) and name in BROKER_KEYS]


def _group_configs(ctx: RequestContext, group: str, keys: set[str] | None) -> list[typed.DescribeConfigsResourceResult]:
    """A share group's settings: the group's own (DYNAMIC_GROUP_CONFIG) or the default."""
    overrides = share_groups.group_configs(ctx, group)
    defaults = share_groups.group_config_defaults(ctx)
    out: list[typed.DescribeConfigsResourceResult] = []
    for name, key in share_groups.GROUP_CONFIG_KEYS.items():
        if keys is None or name in keys:
            source = DYNAMIC_GROUP_CONFIG if name in overrides else DEFAULT_CONFIG
            value = overrides.get(name, defaults[name])
            out.append(_entry(name, value, source, False, [_synonym(name, value, source)], key.kind, key.doc))
    return out


def _client_metrics_configs(ctx: RequestContext, name: str, keys: set[str] | None
                            ) -> list[typed.DescribeConfigsResourceResult]:
    """A client-metrics subscription's settings (CLIENT_METRICS_CONFIG where set, as Kafka)."""
    given = telemetry.broker_telemetry(ctx.broker).configs.get(name, {})
    out: list[typed.DescribeConfigsResourceResult] = []
    for key_name, key in telemetry.CLIENT_METRICS_KEYS.items():
        if keys is None or key_name in keys:
            source = CLIENT_METRICS_CONFIG if key_name in given else DEFAULT_CONFIG
            value = given.get(key_name, format_config_value(key.default))
            out.append(_entry(key_name, value, source, False, [_synonym(key_name, value, source)], key.kind, key.doc))
    return out


def _shaped(configs: list[typed.DescribeConfigsResourceResult], request: typed.DescribeConfigsRequest, version: int) -> list[typed.DescribeConfigsResourceResult]:
    """Drop what the request did not ask for: synonyms (v1+ flag) and documentation."""
    for entry in configs:
        if not (version >= 1 and request.include_synonyms):
            entry["synonyms"] = []
        if not (version >= 3 and request.include_documentation):
            entry["documentation"] = None
    return configs


async def handle(ctx: RequestContext, request: typed.DescribeConfigsRequest) -> typed.DescribeConfigsResponse:
    broker = ctx.broker
    results: list[typed.DescribeConfigsResult] = []
    for resource in request.resources:
        keys = None if resource.configuration_keys is None else set(resource.configuration_keys)
        code, message = ErrorCode.NONE, None
        configs: list[typed.DescribeConfigsResourceResult] = []
        if resource.resource_type == TOPIC and not ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.TOPIC,
                                                                 resource.resource_name):
            code, message = ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."
        elif resource.resource_type == BROKER and not ctx.allowed_on_cluster(Operation.DESCRIBE_CONFIGS):
            code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
        elif resource.resource_type == TOPIC:
            info = broker.metadata.get_topic(resource.resource_name)
            if info is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource.resource_name} does not exist"
            else:
                configs = topic_configs(broker.config, info, keys)
        elif resource.resource_type == BROKER:
            if resource.resource_name not in ("", str(broker.broker_id)):
                code = ErrorCode.INVALID_REQUEST
                message = f"Unexpected broker id, expected {broker.broker_id} or empty string, but received {resource.resource_name}"
            elif resource.resource_name == "":
                configs = _cluster_default_configs(broker.config, keys)
            else:
                configs = _broker_configs(broker.config, keys)
        elif resource.resource_type == GROUP:
            if not ctx.allowed(Operation.DESCRIBE_CONFIGS, ResourceType.GROUP, resource.resource_name):
                code, message = ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed."
            else:
                configs = _group_configs(ctx, resource.resource_name, keys)
        elif resource.resource_type == telemetry.CLIENT_METRICS:
            if not ctx.allowed_on_cluster(Operation.DESCRIBE_CONFIGS):
                code, message = ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed."
            else:
                configs = _client_metrics_configs(ctx, resource.resource_name, keys)
        else:
            code, message = ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}"
        results.append(
            {
                "error_code": code,
                "error_message": message,
                "resource_type": resource.resource_type,
                "resource_name": resource.resource_name,
                "configs": _shaped(configs, request, ctx.api_version),
            }
        )
    return {"throttle_time_ms": 0, "results": results}
