"""DescribeProducers (key 61, KIP-664): the producers a partition's leader keeps state
for (``pykfk.log.producer_state``): epoch, last sequence, last timestamp, the coordinator
epoch of the last transaction marker written for it (-1 before any) and the first offset
of the transaction it has open there (-1 none). Needs Read on the topic; only the leader
answers (NOT_LEADER_OR_FOLLOWER elsewhere)."""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 61
VERSIONS = (0, 0)


def _partition(ctx: RequestContext, topic: str, partition: int) -> typed.DescribeProducersResponsePartitionResponse:
    answer: typed.DescribeProducersResponsePartitionResponse = {"partition_index": partition, "error_code": ErrorCode.NONE, "error_message": None,
                              "active_producers": []}
    try:
        state = ctx.broker.replica_manager.leader_log(topic, partition).producer_state
    except KafkaError as exc:
        answer["error_code"] = exc.code
        return answer
    answer["active_producers"] = [
        {"producer_id": pid, "producer_epoch": entry.producer_epoch, "last_sequence": entry.last_seq,
         "last_timestamp": entry.last_timestamp, "coordinator_epoch": entry.coordinator_epoch,
         "current_txn_start_offset": state.ongoing.get(pid, -1)}
        for pid, entry in sorted(state.producers.items())]
    return answer


async def handle(ctx: RequestContext, request: typed.DescribeProducersRequest) -> typed.DescribeProducersResponse:
    topics: list[typed.DescribeProducersResponseTopicResponse] = []
    for topic in request.topics:
        if not ctx.allowed(Operation.READ, ResourceType.TOPIC, topic.name):
            partitions: list[typed.DescribeProducersResponsePartitionResponse] = [{"partition_index": p, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                           "error_message": None, "active_producers": []} for p in topic.partition_indexes]
        else:
            partitions = [_partition(ctx, topic.name, p) for p in topic.partition_indexes]
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
