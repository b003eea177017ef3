"""ListOffsets (key 2): earliest (-2), latest (-1) or the first offset at or after a
timestamp, looked up by the leader's ``Partition.fetch_offset_for_timestamp`` (the log's
time indexes, ``Log.fetch_offset_by_timestamp``).

v0 answers with a list of offsets (``old_style_offsets``): segment base offsets and the
log end, by the segments' modification times, as Kafka's legacy path does (a consumer
never sees an offset past the high watermark). v1+ answers with one offset and its
timestamp. "Latest" is the high watermark, or the last stable offset for isolation_level 1
(read_committed, v2+); that limit also bounds timestamp lookups. Only the partition's
leader answers (NOT_LEADER_OR_FOLLOWER elsewhere). From v4 a client's current leader epoch
is checked (FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer) and the answer
carries the epoch of the leader that wrote the offset; v6 is the first flexible version.
v7 adds -3 (the record with the largest timestamp, KIP-734), v8 -4 (the earliest local
offset, KIP-405: the log start, every segment being local), v9 -5 (the last tiered
offset, KIP-1005: -1, nothing is tiered), v10 a request timeout for remote lookups
(KIP-1075; every lookup here is local and answered at once).
A new leader answers a consumer OFFSET_NOT_AVAILABLE (retriable) for "latest", or for a
lookup that finds nothing below the limit, until its high watermark reaches the start of
its leader epoch, as Kafka does: the offsets a partition reports never go back across a
leader change.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 2
VERSIONS = (0, 10)

CONSUMER_REPLICA_ID = -1


async def handle(ctx: RequestContext, request: typed.ListOffsetsRequest) -> typed.ListOffsetsResponse:
    replicas = ctx.broker.replica_manager
    v0 = ctx.api_version == 0
    read_committed = ctx.api_version >= 2 and request.isolation_level == 1
    consumer = request.replica_id == CONSUMER_REPLICA_ID
    topics: list[typed.ListOffsetsTopicResponse] = []
    for topic in request.topics:
        partitions: list[typed.ListOffsetsPartitionResponse] = []
        denied = not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, topic.name)
        for part in topic.partitions:
            entry: typed.ListOffsetsPartitionResponse = {"partition_index": part.partition_index}
            try:
                if denied:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                leader = replicas.leader_partition(topic.name, part.partition_index)
                if v0:
                    offsets = leader.legacy_offsets(part.timestamp, part.max_num_offsets, consumer,
                                                    part.current_leader_epoch)
                    entry.update({"error_code": ErrorCode.NONE, "old_style_offsets": offsets})
                else:
                    timestamp, offset, epoch = leader.fetch_offset_for_timestamp(
                        part.timestamp, read_committed, consumer, part.current_leader_epoch)
                    entry.update({"error_code": ErrorCode.NONE, "timestamp": timestamp, "offset": offset,
                                  "leader_epoch": epoch})
            except KafkaError as exc:
                entry.update({"error_code": exc.code, "timestamp": -1, "offset": -1, "old_style_offsets": [],
                              "leader_epoch": -1})
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
