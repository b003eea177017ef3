"""Fetch (key 1): whole record batches straight from segment files, with long polling.

For each partition the log returns a FileRegion (file, position, size) covering whole
batches from the one holding the fetch offset; the connection sends it with sendfile, so
record bytes never pass through Python (the metrics count their bytes per topic, from
the regions' sizes, when the answer is final). At least one whole batch is returned even when
it exceeds ``partition_max_bytes``/``max_bytes`` (Fetch v3+ semantics). When fewer than
``min_bytes`` are available the request parks until an append to one of its partitions
or ``max_wait_ms`` (Kafka's DelayedFetch); nothing polls.

Fetch sessions (KIP-227) are not kept: session_id 0 in every answer makes clients send
full requests. Without transactions the last stable offset is the high watermark.
Versions below 4 expect magic 0/1 message sets: those batches are down-converted.

Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere); a consumer reads up to the
high watermark, a follower (``replica_id`` >= 0) up to the log end offset, and its
``fetch_offset`` tells the leader how far it got (``pykfk.cluster.replica``), before the
fetch parks, so acks=all requests complete as soon as the follower asks for more. A
parked follower fetch wakes on leader appends only, a parked consumer fetch when the high
watermark moves.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pykfk.errors import ErrorCode, KafkaError
from pykfk.metrics.stats import BrokerTopicStats
from pykfk.protocol.types import FileRegion, Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.security.quotas import CONSUMER_BYTE_RATE
from pykfk.server.dispatch import RequestContext

API_KEY = 1
VERSIONS = (0, 12)

log = logging.getLogger("pykfk.server")

INT32_MAX = 2**31 - 1


def _partition_error(partition: int, code: int) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _read_all(ctx: RequestContext, request: Struct, first_pass: bool,
              denied: frozenset[str] = frozenset()) -> tuple[list[dict[str, Any]], int, bool]:
    """One pass over the requested partitions: (responses, bytes available, any error).

    The FileRegions point at duplicated fds owned by the request context, so the
    response stays valid if retention deletes a segment before it is sent. A follower's
    position is taken on the first pass only (later passes follow a wake-up).
    """
    replicas = ctx.broker.replica_manager
    version = ctx.api_version
    remaining = request.max_bytes if version >= 3 else INT32_MAX
    total = 0
    error = False
    responses = []
    for topic in request.topics:
        partitions = []
        if topic.topic in denied:
            responses.append({"topic": topic.topic, "partitions": [
                _partition_error(part.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for part in topic.partitions]})
            error = True
            continue
        for part in topic.partitions:
            try:
                plog, max_offset = replicas.log_for_fetch(
                    topic.topic, part.partition, request.replica_id, part.fetch_offset,
                    part.current_leader_epoch, report_position=first_pass,
                )
            except KafkaError as exc:
                partitions.append(_partition_error(part.partition, exc.code))
                replicas.topic_stats.for_topic(topic.topic).failed_fetch_requests += 1
                error = True
                continue
            # A consumer's read limit is the high watermark already; a follower's the end.
            high_watermark = max_offset if request.replica_id < 0 else plog.high_watermark
            limit = min(part.partition_max_bytes, remaining)
            records: Any = b""
            try:
                if part.fetch_offset == max_offset and plog.log_start_offset <= max_offset:
                    # Nothing new (a caught-up follower or consumer): no segment lookup.
                    region, log_start = None, plog.log_start_offset
                elif limit > 0 or total == 0:
                    # Only the first partition with data may exceed the limits (one whole
                    # batch); later ones are cut, and clients drop a partial last batch.
                    data = plog.read(
                        part.fetch_offset, max(limit, 0), max_offset=max_offset, min_one_message=total == 0
                    )
                    region = data.file_region
                    log_start = data.log_start_offset
                else:
                    region, log_start = None, plog.log_start_offset
                    if not log_start <= part.fetch_offset <= max_offset:
                        raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE)
            except KafkaError as exc:
                partitions.append(_partition_error(part.partition, exc.code))
                replicas.topic_stats.for_topic(topic.topic).failed_fetch_requests += 1
                error = True
                continue
            if region is not None and region.size > 0:
                total += region.size
                remaining -= region.size
                records = _owned_region(ctx, region, version)
            partitions.append(
                {
                    "partition_index": part.partition,
                    "error_code": ErrorCode.NONE,
                    "high_watermark": high_watermark,
                    "last_stable_offset": high_watermark,
                    "log_start_offset": log_start,
                    "aborted_transactions": None,
                    "preferred_read_replica": -1,
                    "records": records,
                }
            )
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total, error


def _owned_region(ctx: RequestContext, region: FileRegion, version: int) -> Any:
    if version < 4:
        from pykfk._core.records import to_legacy

        return to_legacy(region.read(), 0 if version < 2 else 1)
    try:
        pinned = region.pinned()
    except ValueError:
        return None  # the segment closed since the read (deleted): the next fetch rereads
    ctx.pinned.append(pinned)
    return pinned


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    broker = ctx.broker
    if ctx.api_version >= 7 and request.session_id != 0:
        return {"throttle_time_ms": 0, "error_code": ErrorCode.FETCH_SESSION_ID_NOT_FOUND, "session_id": 0, "responses": []}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    first_pass = True
    denied = _denied_topics(ctx, request) if broker.authorizer is not None else frozenset()
    while True:
        responses, available, error = _read_all(ctx, request, first_pass, denied)
        first_pass = False
        remaining = deadline - loop.time()
        if available >= request.min_bytes or error or remaining <= 0 or broker.stopping:
            throttle_ms = 0
            if request.replica_id < 0 and broker.quotas.active:
                throttle_ms = ctx.charge(CONSUMER_BYTE_RATE, available)
            if available:
                _count_bytes_out(broker.replica_manager.topic_stats, responses, request.replica_id >= 0)
            return {"throttle_time_ms": throttle_ms, "error_code": ErrorCode.NONE, "session_id": 0,
                    "responses": responses}
        _release_regions(ctx)
        keys = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
        # A follower waits for the leader's log to grow; a consumer for the high watermark.
        await broker.replica_manager.fetch_waiters(request.replica_id).wait(keys, remaining)


def _count_bytes_out(stats: BrokerTopicStats, responses: list[dict[str, Any]], replication: bool) -> None:
    """Per topic, the record bytes of the answer (once per partition, never per record)."""
    for topic in responses:
        sent = 0
        for part in topic["partitions"]:
            records = part["records"]
            if records:
                sent += records.size if type(records) is FileRegion else len(records)
        if sent:
            topic_stats = stats.for_topic(topic["topic"])
            if replication:
                topic_stats.replication_bytes_out += sent
            else:
                topic_stats.bytes_out += sent


def _denied_topics(ctx: RequestContext, request: Struct) -> frozenset[str]:
    """Topics this fetch may not read: all of them for a follower without CLUSTER_ACTION
    on the cluster, else those without READ."""
    names = {t.topic for t in request.topics}
    if request.replica_id >= 0:
        return frozenset() if ctx.allowed_on_cluster(Operation.CLUSTER_ACTION) else frozenset(names)
    return frozenset(n for n in names if not ctx.allowed(Operation.READ, ResourceType.TOPIC, n))


def _release_regions(ctx: RequestContext) -> None:
    for region in ctx.pinned:
        region.release()
    ctx.pinned.clear()
