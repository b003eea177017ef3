"""DeleteRecords (key 21): a partition's records below the given offset (-1: the high
watermark) become unreadable at once, the log start offset moves there, and whole
segments below it are deleted by the next retention pass. Followers take the new start
from their fetches. Only the leader answers; DELETE on the topic is needed."""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 21
VERSIONS = (0, 2)
HIGH_WATERMARK = -1


def _delete(ctx: RequestContext, topic: str, partition: typed.DeleteRecordsPartition) -> typed.DeleteRecordsPartitionResult:
    try:
        plog = ctx.broker.replica_manager.leader_log(topic, partition.partition_index)
        offset = plog.high_watermark if partition.offset == HIGH_WATERMARK else partition.offset
        if offset < 0:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {partition.offset}")
        plog.advance_log_start_offset(offset)
        return {"partition_index": partition.partition_index, "low_watermark": plog.log_start_offset,
                "error_code": ErrorCode.NONE}
    except KafkaError as exc:
        return {"partition_index": partition.partition_index, "low_watermark": -1, "error_code": exc.code}


def handle(ctx: RequestContext, request: typed.DeleteRecordsRequest) -> typed.DeleteRecordsResponse:
    topics: list[typed.DeleteRecordsTopicResult] = []
    for topic in request.topics:
        if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, topic.name):
            partitions: list[typed.DeleteRecordsPartitionResult] = [{"partition_index": p.partition_index, "low_watermark": -1,
                           "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED} for p in topic.partitions]
        else:
            partitions = [_delete(ctx, topic.name, p) for p in topic.partitions]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
