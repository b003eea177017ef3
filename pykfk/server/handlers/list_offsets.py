"""ListOffsets (key 2): earliest (-2), latest (-1) or the first offset at or after a
timestamp, looked up through the segments' time indexes (the seeds' getOffsetsBefore).

v0 answers with a list of offsets (``old_style_offsets``): segment base offsets and the
log end, by the segments' modification times, as Kafka's legacy path does (a consumer
never sees an offset past the high watermark). v1+ answers with one offset and its
timestamp. "Latest" is the high watermark, or the last stable offset for isolation_level 1
(read_committed, v2+); that limit also bounds timestamp lookups. Only the partition's
leader answers (NOT_LEADER_OR_FOLLOWER elsewhere). From v4 a client's current leader epoch
is checked (FENCED_LEADER_EPOCH when older, UNKNOWN_LEADER_EPOCH when newer) and the answer
carries the epoch of the leader that wrote the offset; v6 is the first flexible version.
A new leader answers a consumer OFFSET_NOT_AVAILABLE (retriable) for "latest", or for a
lookup that finds nothing below the limit, until its high watermark reaches the start of
its leader epoch, as Kafka does: the offsets a partition reports never go back across a
leader change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pykfk._core.records import iter_records
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log.log import Log
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

if TYPE_CHECKING:
    from pykfk.cluster.replica import Partition

API_KEY = 2
VERSIONS = (0, 8)

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3  # v7+ (KIP-734): the record with the largest timestamp
EARLIEST_LOCAL = -4  # v8+ (KIP-405): every segment is local here, so the log start
CONSUMER_REPLICA_ID = -1


def _lookup(leader: Partition, timestamp: int, read_committed: bool, client: bool) -> tuple[int, int]:
    """(timestamp, offset) answered for ``timestamp``; (-1, -1) when no record is that late.
    A client (replica id -1) asking a new leader whose high watermark has not reached the
    start of its epoch yet gets OFFSET_NOT_AVAILABLE for "latest" and for a lookup that
    finds nothing below the limit, as from Kafka: that high watermark, and so the last
    stable offset, may be behind what the previous leader answered, and an answer must
    never move backwards; the client retries."""
    plog = leader.log
    limit = plog.last_stable_offset if read_committed else plog.high_watermark
    if timestamp == LATEST:
        if client:
            leader.check_high_watermark_known()
        return -1, limit
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, plog.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        return _max_timestamp(plog)
    if timestamp < 0:
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported special timestamp {timestamp}")
    found = plog.offset_for_timestamp(timestamp)
    if found is None or found >= limit:
        if client:
            leader.check_high_watermark_known()
        return -1, -1
    return _first_record_at_or_after(plog, found, timestamp, limit)


def _max_timestamp(plog: Log) -> tuple[int, int]:
    """The record with the largest timestamp (the first such one), found through the
    segments' largest timestamps and then inside its batch; (-1, -1) for an empty log."""
    best = None
    for segment in plog.segments:
        if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
            best = segment
    if best is None:
        return -1, -1
    offset = best.offset_for_timestamp(best.max_timestamp)
    if offset is None:
        return -1, -1
    return _first_record_at_or_after(plog, max(offset, plog.log_start_offset), best.max_timestamp, plog.log_end_offset)


def _first_record_at_or_after(plog: Log, offset: int, timestamp: int, limit: int) -> tuple[int, int]:
    """The index finds the batch; Kafka answers with the first *record* whose timestamp
    is >= the target, and that record's own timestamp, so look inside the batch."""
    data = plog.read(offset, 1, max_offset=limit)
    region = data.file_region
    if region is None or region.size == 0:
        return timestamp, offset
    batch = region.read()
    for record in iter_records(batch):
        if record.offset >= offset and record.timestamp >= timestamp:
            return record.timestamp, record.offset
    return timestamp, offset


def _legacy_offsets(plog: Log, timestamp: int, max_num_offsets: int, consumer: bool) -> list[int]:
    offsets = plog.legacy_offsets_before(timestamp, max_num_offsets)
    if not consumer:
        return offsets
    # A consumer is told the high watermark in place of anything past it.
    high_watermark = plog.high_watermark
    if offsets and offsets[0] > high_watermark:
        return [high_watermark] + [o for o in offsets if o <= high_watermark]
    return offsets


async def handle(ctx: RequestContext, request: typed.ListOffsetsRequest) -> typed.ListOffsetsResponse:
    replicas = ctx.broker.replica_manager
    v0 = ctx.api_version == 0
    read_committed = ctx.api_version >= 2 and request.isolation_level == 1
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
                leader.check_leader_epoch(part.current_leader_epoch)
                plog = leader.log
                if v0:
                    offsets = _legacy_offsets(plog, part.timestamp, part.max_num_offsets,
                                              request.replica_id == CONSUMER_REPLICA_ID)
                    entry.update({"error_code": ErrorCode.NONE, "old_style_offsets": offsets})
                else:
                    timestamp, offset = _lookup(leader, part.timestamp, read_committed,
                                                request.replica_id == CONSUMER_REPLICA_ID)
                    entry.update({"error_code": ErrorCode.NONE, "timestamp": timestamp, "offset": offset,
                                  "leader_epoch": leader.epochs.epoch_for(offset) if offset >= 0 else -1})
            except KafkaError as exc:
                entry.update({"error_code": exc.code, "timestamp": -1, "offset": -1, "old_style_offsets": [],
                              "leader_epoch": -1})
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
