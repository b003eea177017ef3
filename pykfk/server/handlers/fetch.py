"""Fetch (key 1): whole record batches straight from segment files, with long polling.

For each partition the log returns a FileRegion (file, position, size) covering whole
batches from the one holding the fetch offset; the connection sends it with sendfile, so
record bytes never pass through Python (the metrics count their bytes per topic, from
the regions' sizes, when the answer is final). At least one whole batch is returned even when
it exceeds ``partition_max_bytes``/``max_bytes`` (Fetch v3+ semantics). When fewer than
``min_bytes`` are available the request parks until an append to one of its partitions
or ``max_wait_ms`` (Kafka's DelayedFetch); nothing polls.

Incremental fetch sessions (KIP-227, ``pykfk.server.fetch_sessions``): a v7+ fetch may
open a session and later name only what changed; its answers then hold only partitions
with news.

isolation_level 1 (read_committed, v4+) reads up to the last stable offset (the first
offset of the earliest open transaction, else the high watermark) and lists the aborted
transactions whose batches the answer may hold, so the consumer drops them; every answer
reports the partition's last stable offset.
Versions below 4 expect magic 0/1 message sets: those batches are down-converted.

With ``replica.selector.class`` set to Kafka's RackAwareReplicaSelector, a v11+
consumer that names its rack is pointed at an in-sync replica in that rack
(``preferred_read_replica``, KIP-392), and a follower serves v11+ consumers up to its own
high watermark. Otherwise only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere); a consumer reads up to the
high watermark, a follower (``replica_id`` >= 0) up to the log end offset, and its
``fetch_offset`` tells the leader how far it got (``pykfk.cluster.replica``), before the
fetch parks, so acks=all requests complete as soon as the follower asks for more. A
parked follower fetch wakes on leader appends only, a parked consumer fetch when the high
watermark moves. A v18 follower names the high watermark it knows per partition
(KIP-1166): when that is behind the leader's, the fetch is answered at once instead of
parking, so the follower learns the new high watermark without waiting for data.
v17's replica_directory_id (KIP-853) is for KRaft voters and is not used here.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from collections.abc import Coroutine, Sequence

from pykfk._core.wire import decode_fetch, encode_fetch_response
from pykfk.cluster.metadata import ClusterView
from pykfk.errors import ErrorCode, KafkaError
from pykfk.metrics.stats import BrokerTopicStats
from pykfk.protocol import framing, typed
from pykfk.protocol.types import ZERO_UUID, FileRegion, Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.security.quotas import CONSUMER_BYTE_RATE
from pykfk.server.dispatch import Chunks, RequestContext
from pykfk.server.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    NO_SESSION,
    FetchSession,
    FetchSessionCache,
    ReadTopic,
)
from pykfk.server.handlers.metadata import topic_ids

API_KEY = 1
VERSIONS = (0, 18)

log = logging.getLogger("pykfk.server")

INT32_MAX = 2**31 - 1


def decode_request(view: memoryview, offset: int, version: int) -> Struct:
    """The request body, compiled (``pykfk._core.wire``): the generic decoder's Struct."""
    return decode_fetch(view, offset, version)


def encode_response(version: int, correlation_id: int, body: typed.FetchResponse) -> Chunks:
    """The response frame as chunks, compiled (``pykfk._core.wire``); a body with a field
    that encoder leaves out (tagged fields) goes through the generic encoder."""
    chunks = encode_fetch_response(version, correlation_id, body)
    if chunks is None:
        return framing.encode_response(API_KEY, version, correlation_id, body)
    return chunks


def _partition_error(partition: int, code: int) -> typed.FetchResponsePartitionData:
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


def _read_all(ctx: RequestContext, topics: Sequence[ReadTopic], replica_id: int, max_bytes: int, first_pass: bool,
              denied: frozenset[str] = frozenset(), read_committed: bool = False, client_rack: str | None = None
              ) -> tuple[list[typed.FetchableTopicResponse], int, bool]:
    """One pass over the requested partitions: (responses, bytes available, answer now:
    an error, or a v18 follower behind the leader's high watermark).

    The FileRegions point at duplicated fds owned by the request context, so the
    response stays valid if retention deletes a segment before it is sent. A follower's
    position is taken on the first pass only (later passes follow a wake-up).
    """
    replicas = ctx.broker.replica_manager
    version = ctx.api_version
    remaining = max_bytes if version >= 3 else INT32_MAX
    total = 0
    error = False
    responses: list[typed.FetchableTopicResponse] = []
    for topic in topics:
        partitions: list[typed.FetchResponsePartitionData] = []
        if topic.topic in denied:
            responses.append({"topic": topic.topic, "partitions": [
                _partition_error(part.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED) for part in topic.partitions]})
            error = True
            continue
        for part in topic.partitions:
            try:
                plog, max_offset = replicas.log_for_fetch(
                    topic.topic, part.partition, replica_id, part.fetch_offset,
                    part.current_leader_epoch, report_position=first_pass, consumer_on_follower=version >= 11,
                )
            except KafkaError as exc:
                partitions.append(_partition_error(part.partition, exc.code))
                replicas.topic_stats.for_topic(topic.topic).failed_fetch_requests += 1
                error = True
                continue
            # A consumer's read limit is the high watermark already; a follower's the end.
            high_watermark = max_offset if replica_id < 0 else plog.high_watermark
            if part.high_watermark < high_watermark and replica_id >= 0:
                error = True  # KIP-1166: tell the follower now (v18+; older: never)
            if client_rack is not None:
                preferred = _preferred_read_replica(ctx, topic.topic, part.partition, client_rack)
                if preferred >= 0:  # KIP-392: read from the replica in the client's rack
                    partitions.append({**_partition_error(part.partition, ErrorCode.NONE),
                                       "high_watermark": high_watermark,
                                       "last_stable_offset": plog.last_stable_offset,
                                       "log_start_offset": plog.log_start_offset,
                                       "preferred_read_replica": preferred})
                    continue
            last_stable = plog.last_stable_offset
            if read_committed:
                max_offset = last_stable
            # Conditionals, not min()/max(): this runs for every partition a Fetch reads.
            limit = part.partition_max_bytes
            if limit > remaining:  # noqa: PLR1730
                limit = remaining
            records: typed.RecordsData = b""
            try:
                if part.fetch_offset == max_offset and plog.log_start_offset <= max_offset:
                    # Nothing new (a caught-up follower or consumer): no segment lookup.
                    region, log_start = None, plog.log_start_offset
                elif limit > 0 or total == 0:
                    # Only the first partition with data may exceed the limits (one whole
                    # batch); later ones are cut, and clients drop a partial last batch.
                    data = plog.read(
                        part.fetch_offset, limit if limit > 0 else 0, max_offset=max_offset,  # noqa: FURB136
                        min_one_message=total == 0
                    )
                    region = data.file_region
                    log_start = data.log_start_offset
                else:
                    region, log_start = None, plog.log_start_offset
                    # Past the read limit but not the log end (a new leader's high
                    # watermark still catching up): nothing to read, not out of range.
                    if not log_start <= part.fetch_offset <= plog.log_end_offset:
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
            aborted: list[typed.FetchResponseAbortedTransaction] | None = None
            if read_committed and region is not None and len(plog.aborted_txns):
                aborted = [{"producer_id": txn.producer_id, "first_offset": txn.first_offset}
                           for txn in plog.aborted_transactions(part.fetch_offset, max_offset)] or None
            partitions.append(
                {
                    "partition_index": part.partition,
                    "error_code": ErrorCode.NONE,
                    "high_watermark": high_watermark,
                    "last_stable_offset": last_stable,
                    "log_start_offset": log_start,
                    "aborted_transactions": aborted,
                    "preferred_read_replica": -1,
                    "records": records,
                }
            )
        responses.append({"topic": topic.topic, "partitions": partitions})
    return responses, total, error


def _preferred_read_replica(ctx: RequestContext, topic: str, partition: int, client_rack: str) -> int:
    """Kafka's RackAwareReplicaSelector, asked on the leader: an in-sync replica in the
    client's rack (the lowest id), or -1 when the leader is there itself or none is."""
    broker = ctx.broker
    if broker.config["broker.rack"] == client_rack:
        return -1
    state = broker.metadata.partition_state(topic, partition)
    if state is None or state.leader != broker.broker_id:
        return -1
    in_rack = [replica for replica in state.isr if replica != broker.broker_id
               and (info := broker.metadata.get_broker(replica)) is not None and info.rack == client_rack]
    return min(in_rack, default=-1)


def _owned_region(ctx: RequestContext, region: FileRegion, version: int) -> typed.RecordsData:
    if version < 4:
        from pykfk._core.records import to_legacy

        return to_legacy(region.read(), 0 if version < 2 else 1)
    try:
        pinned = region.pinned()
    except ValueError:
        return None  # the segment closed since the read (deleted): the next fetch rereads
    ctx.pinned.append(pinned)
    return pinned


def handle(ctx: RequestContext, request: typed.FetchRequest
           ) -> typed.FetchResponse | Coroutine[None, None, typed.FetchResponse]:
    """The answer at once when the first read has it (data, an error, no wait asked);
    otherwise a coroutine that parks until an append or ``max_wait_ms``. A fetch
    answered at once costs no task."""
    broker = ctx.broker
    if ctx.api_version >= 15:  # the replica id moved into the tagged replica state
        state = request.replica_state
        request.replica_id = state.replica_id if state is not None else -1
    known_as: dict[str, uuid.UUID] | None = None
    unknown: list[typed.FetchableTopicResponse] = []
    if ctx.api_version >= 13:
        known_as, unknown = _named_by_id(broker.metadata, request)
    topics: Sequence[ReadTopic] = request.topics
    session: FetchSession | None = None
    if ctx.api_version >= 7 and (request.session_id, request.session_epoch) != (NO_SESSION, FINAL_EPOCH):
        found = _session(ctx, request)
        if isinstance(found, int):  # an error code: the client starts over with a full fetch
            return {"throttle_time_ms": 0, "error_code": found, "session_id": NO_SESSION, "responses": []}
        session = found
        if session is not None and known_as is not None:
            session.topic_ids.update(known_as)
            known_as = session.topic_ids
        if session is not None and request.session_id != NO_SESSION:
            topics = session.topics()
            if known_as is not None:
                topics, stale = _split_stale(broker.metadata, topics, known_as)
                unknown += stale
    fetch = _Fetch(ctx, request, topics, session, known_as, unknown)
    body = fetch.answer(first_pass=True)
    if body is not None:
        return body
    return fetch.parked()


class _Fetch:
    """One Fetch request's reads: ``answer`` reads every partition once and gives the
    response body when the request is done (enough bytes, an error, its wait over);
    ``parked`` waits for appends between reads until then."""

    def __init__(self, ctx: RequestContext, request: typed.FetchRequest, topics: Sequence[ReadTopic],
                 session: FetchSession | None, known_as: dict[str, uuid.UUID] | None,
                 unknown: list[typed.FetchableTopicResponse]):
        broker = ctx.broker
        self.ctx = ctx
        self.request = request
        self.topics = topics
        self.session = session
        self.known_as = known_as
        self.unknown = unknown
        # The deadline is set when the fetch parks: a fetch answered at once reads no clock
        # and never looks the loop up (asyncio.get_running_loop() costs a getpid system call).
        self.loop: asyncio.AbstractEventLoop | None = None
        self.deadline = 0.0
        self.read_committed = ctx.api_version >= 4 and request.isolation_level == 1 and request.replica_id < 0
        self.denied = _denied_topics(ctx, request.replica_id, topics) if broker.authorizer is not None \
            else frozenset()
        self.client_rack = (request.rack_id or None) if ctx.api_version >= 11 and request.replica_id < 0 and \
            broker.config["replica.selector.class"] else None

    def answer(self, first_pass: bool) -> typed.FetchResponse | None:
        ctx, request, broker = self.ctx, self.request, self.ctx.broker
        responses, available, error = _read_all(ctx, self.topics, request.replica_id, request.max_bytes, first_pass,
                                                self.denied, self.read_committed, self.client_rack)
        if not (available >= request.min_bytes or error or broker.stopping
                or (request.max_wait_ms <= 0 if self.loop is None else self.deadline - self.loop.time() <= 0)):
            _release_regions(ctx)
            return None
        throttle_ms = 0
        if request.replica_id < 0 and broker.quotas.active:
            throttle_ms = ctx.charge(CONSUMER_BYTE_RATE, available)
        if available:
            _count_bytes_out(broker.replica_manager.topic_stats, responses, request.replica_id >= 0)
        session, known_as = self.session, self.known_as
        if session is not None:
            responses = _session_answer(session, responses, incremental=request.session_id != NO_SESSION)
        if known_as is not None:
            responses = [{**topic, "topic_id": known_as.get(topic["topic"], ZERO_UUID)} for topic in responses]
            responses += self.unknown
        return {"throttle_time_ms": throttle_ms, "error_code": ErrorCode.NONE,
                "session_id": session.session_id if session is not None else NO_SESSION,
                "responses": responses}

    async def parked(self) -> typed.FetchResponse:
        request = self.request
        keys = [(t.topic, p.partition) for t in self.topics for p in t.partitions]
        # A follower waits for the leader's log to grow; a consumer for the high watermark.
        waiters = self.ctx.broker.replica_manager.fetch_waiters(request.replica_id)
        loop = self.loop = asyncio.get_running_loop()
        self.deadline = loop.time() + request.max_wait_ms / 1000
        while True:
            await waiters.wait(keys, self.deadline - loop.time())
            body = self.answer(first_pass=False)
            if body is not None:
                return body


def _named_by_id(store: ClusterView, request: typed.FetchRequest
                 ) -> tuple[dict[str, uuid.UUID], list[typed.FetchableTopicResponse]]:
    """Fetch v13+ names topics by id: each requested (and forgotten) topic gets its name;
    topics whose id no topic has are taken out of the request and answered
    UNKNOWN_TOPIC_ID. Returns the id of each name and those answers."""
    ids = topic_ids(store)
    known_as: dict[str, uuid.UUID] = {}
    unknown: list[typed.FetchableTopicResponse] = []
    kept: list[typed.FetchTopic] = []
    for topic in request.topics:
        name = ids.name_of(topic.topic_id)
        if name is None:
            unknown.append(_unknown_topic_id(topic.topic_id, [p.partition for p in topic.partitions]))
            continue
        topic.topic = name
        known_as[name] = topic.topic_id
        kept.append(topic)
    request.topics = kept
    for forgotten in request.forgotten_topics_data:
        forgotten.topic = ids.name_of(forgotten.topic_id) or ""
    return known_as, unknown


def _split_stale(store: ClusterView, topics: Sequence[ReadTopic], known_as: dict[str, uuid.UUID]
                 ) -> tuple[list[ReadTopic], list[typed.FetchableTopicResponse]]:
    """A session's topics still the topics the client knows (same id), and answers for
    those deleted and made again since (UNKNOWN_TOPIC_ID: never the new topic's records)."""
    ids = topic_ids(store)
    current: list[ReadTopic] = []
    stale: list[typed.FetchableTopicResponse] = []
    for topic in topics:
        if ids.id_of(topic.topic) == known_as.get(topic.topic):
            current.append(topic)
        else:
            stale.append(_unknown_topic_id(known_as.get(topic.topic, ZERO_UUID), [p.partition for p in topic.partitions]))
    return current, stale


def _unknown_topic_id(topic_id: uuid.UUID, partitions: list[int]) -> typed.FetchableTopicResponse:
    return {"topic": "", "topic_id": topic_id,
            "partitions": [_partition_error(p, ErrorCode.UNKNOWN_TOPIC_ID) for p in partitions]}


_SESSION_CACHES: weakref.WeakKeyDictionary[object, FetchSessionCache] = weakref.WeakKeyDictionary()


def session_cache(ctx: RequestContext) -> FetchSessionCache:
    """The broker's fetch sessions (made on first use)."""
    cache = _SESSION_CACHES.get(ctx.broker)
    if cache is None:
        slots = ctx.broker.config["max.incremental.fetch.session.cache.slots"]
        cache = _SESSION_CACHES[ctx.broker] = FetchSessionCache(
            slots, ctx.broker.replica_manager.clock, ctx.broker.config["min.incremental.fetch.session.eviction.ms"])
    return cache


def _session(ctx: RequestContext, request: typed.FetchRequest) -> FetchSession | int | None:
    """The session this fetch opens or continues (None: answer without one), or the
    error code that refuses it."""
    cache = session_cache(ctx)
    if request.session_id == NO_SESSION:
        if request.session_epoch != INITIAL_EPOCH:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        session = cache.create(privileged=request.replica_id >= 0)
        if session is not None:
            session.update(request.topics)
        return session
    if request.session_epoch == FINAL_EPOCH:
        cache.remove(request.session_id)
        return None
    session = cache.get(request.session_id)
    if session is None:
        return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    if request.session_epoch != session.epoch:
        return ErrorCode.INVALID_FETCH_SESSION_EPOCH
    session.update(request.topics, request.forgotten_topics_data)
    session.next_epoch()
    return session


def _session_answer(session: FetchSession, responses: list[typed.FetchableTopicResponse], incremental: bool
                    ) -> list[typed.FetchableTopicResponse]:
    """Remember what each partition's answer told the client; an incremental answer keeps
    only the partitions with news."""
    out: list[typed.FetchableTopicResponse] = []
    for topic in responses:
        kept: list[typed.FetchResponsePartitionData] = []
        for answer in topic["partitions"]:
            state = session.partitions.get((topic["topic"], answer["partition_index"]))
            news = state.changed(answer) if state is not None else True
            if news or not incremental:
                kept.append(answer)
        if kept:
            out.append({"topic": topic["topic"], "partitions": kept})
    return out


def _count_bytes_out(stats: BrokerTopicStats, responses: list[typed.FetchableTopicResponse], replication: bool) -> None:
    """Per topic, the record bytes of the answer (once per partition, never per record)."""
    for topic in responses:
        sent = 0
        for part in topic["partitions"]:
            records = part["records"]
            if records:
                # Records the reads put in an answer: a FileRegion or bytes (never a list).
                sent += records.size if type(records) is FileRegion else len(records)  # type: ignore[arg-type]
        if sent:
            topic_stats = stats.for_topic(topic["topic"])
            if replication:
                topic_stats.replication_bytes_out += sent
            else:
                topic_stats.bytes_out += sent


def _denied_topics(ctx: RequestContext, replica_id: int, topics: Sequence[ReadTopic]) -> frozenset[str]:
    """Topics this fetch may not read: all of them for a follower without CLUSTER_ACTION
    on the cluster, else those without READ."""
    names = {t.topic for t in topics}
    if replica_id >= 0:
        return frozenset() if ctx.allowed_on_cluster(Operation.CLUSTER_ACTION) else frozenset(names)
    return frozenset(n for n in names if not ctx.allowed(Operation.READ, ResourceType.TOPIC, n))


def _release_regions(ctx: RequestContext) -> None:
    for region in ctx.pinned:
        region.release()
    ctx.pinned.clear()
