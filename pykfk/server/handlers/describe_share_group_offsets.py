"""DescribeShareGroupOffsets (key 90): a share group's start offset per partition
(-1 where it has no state), asked of each partition's share coordinator; topics null
asks for every partition the group has state for (of the topics its members subscribe
to, and those whose state this broker holds). DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED);
NOT_COORDINATOR off the group's coordinator."""

from __future__ import annotations

import uuid

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed, topics_denied
from pykfk.server.handlers.metadata import topic_ids
from pykfk.server.share_groups import load_group_configs, share_coordinator, start_offset

API_KEY = 90
VERSIONS = (0, 0)


def _partition(index: int, offset: int = -1, code: int = ErrorCode.NONE
               ) -> typed.DescribeShareGroupOffsetsResponsePartition:
    return {"partition_index": index, "start_offset": offset, "leader_epoch": -1, "error_code": code,
            "error_message": None}


async def _described(ctx: RequestContext, group_id: str, topic_id: uuid.UUID, partition: int
                     ) -> typed.DescribeShareGroupOffsetsResponsePartition:
    code, offset = await start_offset(ctx, group_id, topic_id, partition)
    return _partition(partition, offset, code)


async def _group(ctx: RequestContext, group: typed.DescribeShareGroupOffsetsRequestGroup
           ) -> typed.DescribeShareGroupOffsetsResponseGroup:
    group_id = group.group_id
    answer: typed.DescribeShareGroupOffsetsResponseGroup = {"group_id": group_id, "topics": [],
                                                            "error_code": ErrorCode.NONE, "error_message": None}
    topics: list[typed.DescribeShareGroupOffsetsResponseTopic] = []
    if not group_allowed(ctx, Operation.DESCRIBE, group_id):
        return {**answer, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if not ctx.broker.group_coordinator.owns(group_id):
        return {**answer, "error_code": ErrorCode.NOT_COORDINATOR}
    store = ctx.broker.metadata
    ids = topic_ids(store)
    every = group.topics is None
    if group.topics is None:  # the partitions the group may have state for: held here, or of topics it subscribes to
        coordinator = share_coordinator(ctx)
        held = {(t, p) for g, t, p in coordinator.partitions if g == group_id}
        found = coordinator.groups.get(group_id)
        for topic in {t for m in (found.members.values() if found is not None else ()) for t in m.subscribed}:
            info = store.get_topic(topic)
            held.update((topic, p) for p in range(info.partitions if info is not None else 0))
        asked: dict[str, list[int]] = {}
        for topic, partition in sorted(held):
            asked.setdefault(topic, []).append(partition)
    else:
        asked = {t.topic_name: list(t.partitions) for t in group.topics}
    denied = topics_denied(ctx, Operation.DESCRIBE, asked)
    for topic, partitions in asked.items():
        info = store.get_topic(topic)
        topic_id = ids.id_of(topic)
        if topic in denied or info is None:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if topic in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            rows = [_partition(p, code=code) for p in partitions]
        else:
            rows = [await _described(ctx, group_id, topic_id, p) if 0 <= p < info.partitions
                    else _partition(p, code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) for p in partitions]
        if every:  # only where it has state
            rows = [r for r in rows if r["start_offset"] >= 0 or r["error_code"] != ErrorCode.NONE]
        if rows:
            topics.append({"topic_name": topic, "topic_id": topic_id, "partitions": rows})
    return {**answer, "topics": topics}


async def handle(ctx: RequestContext, request: typed.DescribeShareGroupOffsetsRequest
                 ) -> typed.DescribeShareGroupOffsetsResponse:
    await load_group_configs(ctx)  # the state topic, created on first use
    return {"throttle_time_ms": 0, "groups": [await _group(ctx, g) for g in request.groups]}
