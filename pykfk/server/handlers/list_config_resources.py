"""ListConfigResources (key 74): the config resources of the cluster. v0 (Kafka 3.7's
ListClientMetricsResources) lists the client-metrics subscriptions; v1 (KIP-1142) lists
the resources of the types asked for (none: every type): topics, brokers and their
loggers, client-metrics subscriptions, and groups with settings of their own. A type
without config resources answers UNSUPPORTED_VERSION for the request.
Needs DESCRIBE_CONFIGS on the cluster, as Kafka."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server import share_groups, telemetry
from pykfk.server.dispatch import RequestContext

API_KEY = 74
VERSIONS = (0, 1)

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
LISTED_TYPES = (TOPIC, BROKER, BROKER_LOGGER, telemetry.CLIENT_METRICS, GROUP)


def _names(ctx: RequestContext, resource_type: int) -> list[str]:
    if resource_type == TOPIC:
        return sorted(ctx.broker.metadata.topics())
    if resource_type in (BROKER, BROKER_LOGGER):
        return [str(b.node_id) for b in sorted(ctx.broker.metadata.brokers(), key=lambda b: b.node_id)]
    if resource_type == GROUP:
        return share_groups.configured_groups(ctx)
    return sorted(telemetry.broker_telemetry(ctx.broker).configs)


async def handle(ctx: RequestContext, request: typed.ListConfigResourcesRequest) -> typed.ListConfigResourcesResponse:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "config_resources": []}
    if ctx.api_version == 0:
        types: list[int] = [telemetry.CLIENT_METRICS]
    else:
        types = list(dict.fromkeys(request.resource_types)) or list(LISTED_TYPES)
    if any(t not in LISTED_TYPES for t in types):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.UNSUPPORTED_VERSION, "config_resources": []}
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "config_resources": [{"resource_name": name, "resource_type": t} for t in types for name in _names(ctx, t)]}
