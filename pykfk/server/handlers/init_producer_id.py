"""InitProducerId (key 22): a fresh producer id with epoch 0 for idempotent producers.

Ids come from the metadata store, which persists them in blocks so that no id is handed
out twice, even across restarts. Transactional ids need a transaction coordinator, which
this broker does not have: they get COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.protocol.types import Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 22
VERSIONS = (0, 4)


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    if request.transactional_id is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    authorizer = ctx.broker.authorizer
    if authorizer is not None and not (
            ctx.allowed_on_cluster(Operation.IDEMPOTENT_WRITE)
            or authorizer.authorize_any(ctx.session.principal, ctx.session.client_ip, Operation.WRITE,
                                        ResourceType.TOPIC)):
        # Kafka: an idempotent producer needs IdempotentWrite on the cluster or Write on some topic.
        return {"throttle_time_ms": 0, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "producer_id": -1, "producer_epoch": -1}
    producer_id = await ctx.broker.allocate_producer_id()
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "producer_id": producer_id, "producer_epoch": 0}
