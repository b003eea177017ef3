"""FindCoordinator (key 10): the broker leading the group's ``__consumer_offsets``
partition (key_type 0), the transactional id's ``__transaction_state`` partition
(key_type 1), or, from v6, a share partition's ``__share_group_state`` partition (key_type
2, key "groupId:topicId:partition": the share coordinator, asked by share-partition
leaders; CLUSTER_ACTION on the cluster, INVALID_REQUEST for a malformed key or an older
version).

The group coordinator (``pykfk.group``) does the work for groups; ``pykfk.group.api``
shapes the response for every version. Transactional ids need Describe on the
TransactionalId resource (TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise); the first
lookup creates ``__transaction_state``, as Kafka does.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import uuid

from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.group.share.state_records import SHARE_STATE_TOPIC, state_partition
from pykfk.protocol.typed import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    FindCoordinatorResponseCoordinator,
)
from pykfk.protocol.types import replaced
from pykfk.security.acl import Operation, ResourceType
from pykfk.server import share_groups
from pykfk.server.dispatch import RequestContext

API_KEY = 10
# v0-1 are what older librdkafka needs in the range; v4 batches keys; v5 may answer
# TRANSACTION_ABORTABLE; v6 finds share coordinators.
VERSIONS = (0, 6)


DENIED: api.Location = {"error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED, "error_message": "Authorization failed.",
          "node_id": -1, "host": "", "port": -1}
TRANSACTION_DENIED: api.Location = {**DENIED, "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
KEY_TYPE_TRANSACTION = 1
KEY_TYPE_SHARE = 2


async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    keys = [request.key] if ctx.api_version < 4 else list(request.coordinator_keys)
    if request.key_type == KEY_TYPE_TRANSACTION:
        return await _find_transaction_coordinators(ctx, keys)
    if request.key_type == KEY_TYPE_SHARE:
        return await _find_share_coordinators(ctx, keys)
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


def _share_key(key: str) -> tuple[str, uuid.UUID, int] | None:
    """(group, topic id, partition) of a "groupId:topicId:partition" key, None if malformed
    (Kafka's SharePartitionKey)."""
    head, sep, partition = key.rpartition(":")
    group_id, sep2, topic_id = head.rpartition(":")
    if not (sep and sep2 and group_id):
        return None
    try:  # the topic id as Kafka writes it: 22 characters of URL-safe base64
        raw = base64.urlsafe_b64decode(topic_id + "==") if len(topic_id) == 22 else b""
        return (group_id, uuid.UUID(bytes=raw), int(partition)) if len(raw) == 16 else None
    except ValueError:  # binascii.Error is one
        return None


async def _find_share_coordinators(ctx: RequestContext, keys: list[str]) -> FindCoordinatorResponse:
    """v6: the leader of each share partition's ``__share_group_state`` partition."""
    if ctx.api_version < 6:
        return _answer(ctx, keys, {"error_code": ErrorCode.INVALID_REQUEST,
                                   "error_message": "share coordinators are found from FindCoordinator v6",
                                   "node_id": -1, "host": "", "port": -1})
    if not ctx.allowed_on_cluster(Operation.CLUSTER_ACTION):
        return _answer(ctx, keys, {**DENIED, "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED})
    parsed = {key: _share_key(key) for key in keys}
    if any(found is not None for found in parsed.values()):
        await share_groups.ensure_state_topic(ctx)
    info = ctx.broker.metadata.get_topic(SHARE_STATE_TOPIC)

    def locate(key: str) -> api.Location:
        found = parsed[key]
        if found is None:
            return {"error_code": ErrorCode.INVALID_REQUEST, "node_id": -1, "host": "", "port": -1,
                    "error_message": f"share coordinator key {key!r} is not groupId:topicId:partition"}
        node = None if info is None else ctx.broker.cluster.leader_node(
            SHARE_STATE_TOPIC, state_partition(*found, info.partitions), ctx.session.listener_name)
        if node is None:
            return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "node_id": -1, "host": "", "port": -1,
                    "error_message": "the share partition's state partition has no leader"}
        node_id, host, port = node
        return {"error_code": ErrorCode.NONE, "error_message": None, "node_id": node_id, "host": host, "port": port}

    return {"throttle_time_ms": 0, "coordinators": [{"key": key, **locate(key)} for key in keys]}


def _answer(ctx: RequestContext, keys: list[str], found: api.Location) -> FindCoordinatorResponse:
    """The same answer for every key, in the version's layout."""
    if ctx.api_version < 4:
        return api.located(found)
    return {"throttle_time_ms": 0, "coordinators": [{"key": key, **found} for key in keys]}
