"""OffsetDelete (key 47, KIP-496): remove a group's committed offsets of some partitions.

DELETE on the group is needed (else GROUP_AUTHORIZATION_FAILED for the whole request)
and READ on each topic (else TOPIC_AUTHORIZATION_FAILED for its partitions); partitions
that do not exist answer UNKNOWN_TOPIC_OR_PARTITION. The group coordinator keeps the
offsets of topics the group's members still subscribe to (GROUP_SUBSCRIBED_TO_TOPIC).
"""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol.typed import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponseTopic,
)
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed, topics_denied

API_KEY = 47
VERSIONS = (0, 0)


def _exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.broker.metadata.get_topic(topic)
    return info is not None and 0 <= partition < info.partitions


def _answer(error: int, topics: list[OffsetDeleteResponseTopic]) -> OffsetDeleteResponse:
    return {"error_code": error, "throttle_time_ms": 0, "topics": topics}


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not group_allowed(ctx, Operation.DELETE, request.group_id):
        return _answer(ErrorCode.GROUP_AUTHORIZATION_FAILED, [])
    denied = topics_denied(ctx, Operation.READ, [t.name for t in request.topics])
    codes: dict[tuple[str, int], int] = {}
    wanted = []
    for topic in request.topics:
        for partition in topic.partitions:
            key = (topic.name, partition.partition_index)
            if topic.name in denied:
                codes[key] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not _exists(ctx, *key):
                codes[key] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                wanted.append(key)
    result = await ctx.broker.group_coordinator.delete_offsets(request.group_id, wanted)
    if result["error_code"] != ErrorCode.NONE:
        return _answer(result["error_code"], [])
    codes.update(result["partitions"])
    return _answer(ErrorCode.NONE, [
        {"name": topic.name, "partitions": [
            {"partition_index": p.partition_index, "error_code": codes[(topic.name, p.partition_index)]}
            for p in topic.partitions]}
        for topic in request.topics])
