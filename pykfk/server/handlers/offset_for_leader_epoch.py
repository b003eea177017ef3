"""OffsetForLeaderEpoch (key 23): where a leader epoch ended on this partition's leader
(KIP-101, KIP-320). A follower that starts following asks it for its latest epoch and
truncates its log there before fetching, so a tail the leader never had is dropped.

The leader answers from its leader epoch cache (``pykfk.cluster.leader_epoch``): the
largest epoch at or below the one asked and the offset where the next epoch started (the
log end offset for the current epoch). A standalone broker stamps no epochs: it answers
with an undefined epoch and its log end offset.
"""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode, KafkaError

API_KEY = 23
VERSIONS = (0, 3)

UNDEFINED_EPOCH = -1


def _answer(broker: Any, topic: str, part: Any) -> dict:
    replicas = getattr(broker, "replica_manager", None)
    current = getattr(part, "current_leader_epoch", -1)
    if replicas is not None:
        epoch, end_offset = replicas.end_offset_for_epoch(topic, part.partition, part.leader_epoch, current)
    else:
        plog = broker.get_log(topic, part.partition)
        if plog is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        epoch, end_offset = UNDEFINED_EPOCH, plog.log_end_offset
    return {"error_code": ErrorCode.NONE, "partition": part.partition, "leader_epoch": epoch, "end_offset": end_offset}


async def handle(ctx: Any, request: Any) -> dict:
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            try:
                partitions.append(_answer(ctx.broker, topic.topic, part))
            except KafkaError as exc:
                partitions.append({"error_code": exc.code, "partition": part.partition, "leader_epoch": -1, "end_offset": -1})
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
