"""ListConfigResources (key 74): the client-metrics resources (v0 lists only those; v1
lists the asked types, empty meaning all, of which this broker keeps client-metrics
resources). Needs DESCRIBE_CONFIGS on the cluster, as Kafka."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server import telemetry
from pykfk.server.dispatch import RequestContext

API_KEY = 74
VERSIONS = (0, 1)


async def handle(ctx: RequestContext, request: typed.ListConfigResourcesRequest) -> typed.ListConfigResourcesResponse:
    if not ctx.allowed_on_cluster(Operation.DESCRIBE_CONFIGS):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "config_resources": []}
    types = set(request.resource_types)
    if types and telemetry.CLIENT_METRICS not in types:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "config_resources": []}
    state = telemetry.broker_telemetry(ctx.broker, ctx.broker.config)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE,
            "config_resources": [{"resource_name": name, "resource_type": telemetry.CLIENT_METRICS}
                                 for name in sorted(state.configs)]}
