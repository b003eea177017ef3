"""FindCoordinator (key 10): the broker leading the group's ``__consumer_offsets``
partition (key_type 0), or the transactional id's ``__transaction_state`` partition
(key_type 1).

The group coordinator (``pykfk.group``) does the work for groups; ``pykfk.group.api``
shapes the response for every version. Transactional ids need Describe on the
TransactionalId resource (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise); the first
lookup creates ``__transaction_state``, as Kafka does.
"""

from __future__ import annotations

import contextlib
import functools

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
)
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 10
# v0-1 are what older librdkafka needs in the range; v4 batches keys.
VERSIONS = (0, 4)


DENIED: api.Location = {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": "Authorization failed.",
          "node_id": -1, "host": "", "port": -1}
TRANSACTION_DENIED: api.Location = {**DENIED, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
KEY_TYPE_TRANSACTION = 1


async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = [request.key] if ctx.api_version < 4 else list(request.coordinator_keys)
    if request.key_type == KEY_TYPE_TRANSACTION:
        return await _find_transaction_coordinators(ctx, keys)
    denied = set()
    if request.key_type == api.KEY_TYPE_GROUP:
        denied = {key for key in keys if not ctx.allowed(Operation.DESCRIBE, ResourceType.GROUP, key)}
        if ctx.api_version < 4 and denied:
            return api.located(DENIED)
        if len(denied) < len(keys):
            # A topic that could not be made (the store logged why) has no leader: the
            # answer is COORDINATOR_NOT_AVAILABLE and the client asks again.
            with contextlib.suppress(MetadataWriteError):
                await ctx.broker.ensure_offsets_topic()
    if denied:
        request = replaced(request, coordinator_keys=[key for key in keys if key not in denied])
    body = await api.find_coordinator(
        ctx.broker.group_coordinator, ctx.api_version, request,
        node_for_partition=functools.partial(_node_for_partition, ctx),
    )
    if denied:
        refused: list[FindCoordinatorResponseCoordinator] = [{"key": key, **DENIED} for key in keys if key in denied]
        body["coordinators"] = [*body.get("coordinators", ()), *refused]
    return body


def _node_for_partition(ctx: RequestContext, partition: int) -> tuple[int, str, int] | None:
    return ctx.broker.coordinator_node(partition, ctx.session.listener_name)


async def _find_transaction_coordinators(ctx: RequestContext, keys: list[str]) -> FindCoordinatorResponse:
    allowed = {key for key in keys if ctx.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)}
    if allowed:
        with contextlib.suppress(MetadataWriteError):  # no leader then: COORDINATOR_NOT_AVAILABLE
            await ctx.broker.ensure_transaction_topic()
    coordinator = ctx.broker.transaction_coordinator

    def locate(key: str) -> api.Location:
        if key not in allowed:
            return TRANSACTION_DENIED
        node = None if coordinator is None else ctx.broker.transaction_coordinator_node(
            coordinator.partition_for(key), ctx.session.listener_name)
        if node is None:
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE,
                    "error_message": "the transactional id's state partition has no leader",
                    "node_id": -1, "host": "", "port": -1}
        node_id, host, port = node
        return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": node_id, "host": host, "port": port}

    if ctx.api_version < 4:
        return api.located(locate(keys[0]))
    return {"throttle_time_ms": 0, "coordinators": [{"key": key, **locate(key)} for key in keys]}
