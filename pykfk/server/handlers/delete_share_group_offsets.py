"""DeleteShareGroupOffsets (key 92): a share group without members (NON_EMPTY_GROUP
otherwise) forgets its state of whole topics, which it then starts on again from
share.auto.offset.reset. DELETE on the group and READ on each topic, as Kafka checks."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed, topics_denied
from pykfk.server.handlers.metadata import topic_ids
from pykfk.server.share_groups import forget, load_group_configs, share_coordinator

API_KEY = 92
VERSIONS = (0, 0)


def _top(code: int, message: str | None = None) -> typed.DeleteShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


async def handle(ctx: RequestContext, request: typed.DeleteShareGroupOffsetsRequest
                 ) -> typed.DeleteShareGroupOffsetsResponse:
    group_id = request.group_id
    if not group_allowed(ctx, Operation.DELETE, group_id):
        return _top(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if not ctx.broker.group_coordinator.owns(group_id):
        return _top(ErrorCode.NOT_COORDINATOR)
    coordinator = share_coordinator(ctx)
    group = coordinator.groups.get(group_id)
    if group is not None and group.members:
        return _top(ErrorCode.NON_EMPTY_GROUP, f"The share group {group_id} has members.")
    await load_group_configs(ctx)
    store = ctx.broker.metadata
    ids = topic_ids(store)
    denied = topics_denied(ctx, Operation.READ, {t.topic_name for t in request.topics})
    responses: list[typed.DeleteShareGroupOffsetsResponseTopic] = []
    for topic in request.topics:
        name, info, topic_id = topic.topic_name, store.get_topic(topic.topic_name), ids.id_of(topic.topic_name)
        code: int = ErrorCode.NONE
        if name in denied:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif info is None:
            code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            for partition in range(info.partitions):
                coordinator.partitions.pop((group_id, name, partition), None)
                code = await forget(ctx, group_id, topic_id, partition) or code
        responses.append({"topic_name": name, "topic_id": topic_id, "error_code": code, "error_message": None})
    return {**_top(ErrorCode.NONE), "responses": responses}
