"""AlterConfigs and IncrementalAlterConfigs share this: per resource, the ACL check, the
lookup and the change, each resource answered on its own (Kafka's ConfigAdminManager).

Topic resources take their new overrides from the request (``TopicManager`` checks
them like CreateTopics does and the topic's logs take them at once). Broker resources
change the dynamic broker settings (KIP-226) of one broker (its id as the name) or of
every broker (an empty name: the cluster-wide default), kept where Kafka keeps them; the
brokers apply them without a restart. A broker setting that is unknown, invalid or not
changeable at run time is refused with INVALID_REQUEST and nothing is stored, as Kafka
answers for broker resources.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from pykfk.config import (
    BROKER_KEYS,
    TOPIC_KEYS,
    ConfigError,
    ConfigKey,
    TopicKey,
    validate_dynamic_broker_configs,
)
from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server import share_groups, telemetry
from pykfk.server.dispatch import RequestContext

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32

DEFAULT_BROKER_ENTITY = "<default>"

# (the resource from the request, its current settings, the declaration of its keys)
# -> its new settings
class ConfigResource(Protocol):
    """A resource of an AlterConfigs or IncrementalAlterConfigs request."""

    @property
    def resource_type(self) -> int: ...
    @property
    def resource_name(self) -> str: ...


Resource = TypeVar("Resource", bound=ConfigResource)
NewConfigs = Callable[[Resource, dict[str, str], Mapping[str, ConfigKey | TopicKey]], dict[str, str]]


async def alter_resources(ctx: RequestContext, resources: Sequence[Resource], validate_only: bool,
                          new_configs: NewConfigs[Resource]) -> list[typed.AlterConfigsResourceResponse]:
    counts = collections.Counter((r.resource_type, r.resource_name) for r in resources)
    results: list[typed.AlterConfigsResourceResponse] = []
    for resource in resources:
        code, message = ErrorCode.NONE, None
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate resource {resource.resource_name!r}")
            await _alter_one(ctx, resource, validate_only, new_configs)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append({"error_code": code, "error_message": message, "resource_type": resource.resource_type,
                        "resource_name": resource.resource_name})
    return results


async def _alter_one(ctx: RequestContext, resource: Resource, validate_only: bool,
                     new_configs: NewConfigs[Resource]) -> None:
    name = resource.resource_name
    if resource.resource_type == TOPIC:
        if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        info = ctx.broker.metadata.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        configs = new_configs(resource, dict(info.configs), TOPIC_KEYS)
        await ctx.broker.topics.alter_topic_configs(name, configs, validate_only=validate_only)
    elif resource.resource_type == BROKER:
        if not ctx.allowed_on_cluster(Operation.ALTER_CONFIGS):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        await _alter_broker(ctx, resource, validate_only, new_configs)
    elif resource.resource_type == BROKER_LOGGER:
        if not ctx.allowed_on_cluster(Operation.ALTER_CONFIGS):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        raise KafkaError(ErrorCode.INVALID_REQUEST, "broker logger levels cannot be changed on a pykfk broker")
    elif resource.resource_type == GROUP:  # share groups' settings (KIP-932)
        if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.GROUP, name):
            raise KafkaError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "Authorization failed.")
        await share_groups.load_group_configs(ctx)
        configs = new_configs(resource, share_groups.group_configs(ctx, name), share_groups.GROUP_CONFIG_KEYS)
        await share_groups.alter_group_configs(ctx, name, configs, validate_only)
    elif resource.resource_type == telemetry.CLIENT_METRICS:  # KIP-714 subscriptions
        if not ctx.allowed_on_cluster(Operation.ALTER_CONFIGS):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        state = telemetry.broker_telemetry(ctx.broker)
        configs = new_configs(resource, dict(state.configs.get(name, {})), telemetry.CLIENT_METRICS_KEYS)
        await state.alter(name, configs, validate_only)
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}")


async def _alter_broker(ctx: RequestContext, resource: Resource, validate_only: bool,
                        new_configs: NewConfigs[Resource]) -> None:
    entity = broker_entity(ctx, resource.resource_name)
    store = ctx.broker.metadata
    try:
        configs = new_configs(resource, dict(store.broker_configs(entity)), BROKER_KEYS)
        validate_dynamic_broker_configs(configs)
    except ConfigError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {entity}: {exc}") from None
    except KafkaError as exc:
        raise KafkaError(ErrorCode.INVALID_REQUEST, exc.message) from None
    if not validate_only:
        await store.alter_broker_configs(entity, configs)


def broker_entity(ctx: RequestContext, name: str) -> str:
    """A BROKER resource's name as the store's entity: "" is the cluster-wide default;
    a broker id must be this broker's (each broker checks what it is sent, as Kafka's do)."""
    if name == "":
        return DEFAULT_BROKER_ENTITY
    if name != str(ctx.broker.broker_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Unexpected broker id, expected {ctx.broker.broker_id} or empty string, but received {name}")
    return name
