"""DeleteShareGroupOffsets (key 92): a share group without members (NON_EMPTY_GROUP
otherwise) forgets its state of whole topics, which it then starts on again from
share.auto.offset.reset. DELETE on the group and READ on each topic, as Kafka checks."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import topics_denied
from pykfk.server.handlers.metadata import topic_ids
from pykfk.server.share_groups import coordinator_for_offsets_change, forget

API_KEY = 92
VERSIONS = (0, 0)


def _top(code: int, message: str | None = None) -> typed.DeleteShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


async def handle(ctx: RequestContext, request: typed.DeleteShareGroupOffsetsRequest
                 ) -> typed.DeleteShareGroupOffsetsResponse:
    group_id = request.group_id
    coordinator, refused, message = await coordinator_for_offsets_change(ctx, group_id, Operation.DELETE)
    if coordinator is None:
        return _top(refused, message)
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
