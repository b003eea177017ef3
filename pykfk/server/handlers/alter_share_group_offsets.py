"""AlterShareGroupOffsets (key 91): new share-partition start offsets for a share group
without members (NON_EMPTY_GROUP otherwise); the in-flight state below and above is
dropped, the new state stored. READ on the group and on each topic, as Kafka checks."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import topics_denied
from pykfk.server.handlers.metadata import topic_ids
from pykfk.server.share_groups import coordinator_for_offsets_change, store_start

API_KEY = 91
VERSIONS = (0, 0)


def _top(code: int, message: str | None = None) -> typed.AlterShareGroupOffsetsResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": []}


async def handle(ctx: RequestContext, request: typed.AlterShareGroupOffsetsRequest
                 ) -> typed.AlterShareGroupOffsetsResponse:
    group_id = request.group_id
    coordinator, refused, message = await coordinator_for_offsets_change(ctx, group_id, Operation.READ)
    if coordinator is None:
        return _top(refused, message)
    store = ctx.broker.metadata
    ids = topic_ids(store)
    denied = topics_denied(ctx, Operation.READ, {t.topic_name for t in request.topics})
    responses: list[typed.AlterShareGroupOffsetsResponseTopic] = []
    for topic in request.topics:
        name, info, topic_id = topic.topic_name, store.get_topic(topic.topic_name), ids.id_of(topic.topic_name)
        rows: list[typed.AlterShareGroupOffsetsResponsePartition] = []
        for part in topic.partitions:
            code: int = ErrorCode.NONE
            if name in denied:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif info is None or not 0 <= part.partition_index < info.partitions:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif part.start_offset < 0:
                code = ErrorCode.INVALID_REQUEST
            else:
                # A new state epoch: the partition's leader loads it at the group's next
                # share session (or when a write of its older state is fenced).
                code = await store_start(ctx, group_id, topic_id, part.partition_index, part.start_offset)
            rows.append({"partition_index": part.partition_index, "error_code": code, "error_message": None})
        responses.append({"topic_name": name, "topic_id": topic_id, "partitions": rows})
    return {**_top(ErrorCode.NONE), "responses": responses}
