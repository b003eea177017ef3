"""AlterConfigs and IncrementalAlterConfigs share this: per resource, the ACL check, the
lookup and the change, each resource answered on its own (Kafka's ConfigAdminManager).

Topic resources take their new overrides from the request (``TopicManager`` checks
them like CreateTopics does and the topic's logs take them at once). Broker resources
are refused with INVALID_REQUEST: a broker's settings come from its server.properties.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol.types import Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8

# (the resource from the request, the topic's current overrides) -> its new overrides
NewConfigs = Callable[[Struct, dict[str, str]], dict[str, str]]


async def alter_resources(ctx: RequestContext, resources: list[Struct], validate_only: bool,
                          new_configs: NewConfigs) -> list[dict[str, Any]]:
    counts = collections.Counter((r.resource_type, r.resource_name) for r in resources)
    results = []
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


async def _alter_one(ctx: RequestContext, resource: Struct, validate_only: bool, new_configs: NewConfigs) -> None:
    name = resource.resource_name
    if resource.resource_type == TOPIC:
        if not ctx.allowed(Operation.ALTER_CONFIGS, ResourceType.TOPIC, name):
            raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
        info = ctx.broker.metadata.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        configs = new_configs(resource, dict(info.configs))
        await ctx.broker.topics.alter_topic_configs(name, configs, validate_only=validate_only)
    elif resource.resource_type in (BROKER, BROKER_LOGGER):
        if not ctx.allowed_on_cluster(Operation.ALTER_CONFIGS):
            raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Authorization failed.")
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         "dynamic broker configs are not supported: change server.properties and restart")
    else:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type {resource.resource_type}")
