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
from typing import cast

from pykfk._core import fetch_path
from pykfk._core.fetch_path import (
    count_bytes_out,
    partition_error,
    read_all,
    read_partition,
    session_answer,
)
from pykfk._core.wire import decode_fetch, encode_fetch_response
from pykfk.cluster.metadata import ClusterView
from pykfk.errors import ErrorCode, KafkaError
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
    ReadPartition,
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


# Where a parked fetch keeps each partition's answer: (the topic's answers, the index).
_Where = dict[tuple[str, int], tuple[list[typed.FetchResponsePartitionData], int, ReadPartition]]


class _Fetch:
    """One Fetch request's reads: ``answer`` reads every partition once and gives the
    response body when the request is done (enough bytes, an error, its wait over);
    ``parked`` waits for appends until then, re-reading only the partitions appended to
    (the answers of the others stand, their regions pinned), so a fetch of 10,000
    partitions woken by one append reads one partition, not 10,000."""

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
        # The last reads, kept while parked: the answers and the record bytes they hold.
        self.responses: list[typed.FetchableTopicResponse] = []
        self.available = 0
        self.notified_before = 0  # the waiters' append count when the first read began

    def answer(self, first_pass: bool) -> typed.FetchResponse | None:
        """The body after reading every partition, or None (the reads kept) to park."""
        request = self.request
        if first_pass:
            self.notified_before = self.ctx.broker.replica_manager.fetch_waiters(request.replica_id).notified
        responses, available, error = read_all(self.ctx, self.topics, request.replica_id, request.max_bytes,
                                               first_pass, self.denied, self.read_committed, self.client_rack,
                                               self.known_as)
        self.responses, self.available = responses, available
        return self._body(responses, available) if self._done(error) else None

    def _done(self, error: bool) -> bool:
        """Answer now: enough bytes, an error, shutdown, or the wait over (no wait asked
        before the fetch parks)."""
        request = self.request
        return (self.available >= request.min_bytes or error or self.ctx.broker.stopping
                or (request.max_wait_ms <= 0 if self.loop is None else self.deadline - self.loop.time() <= 0))

    def reread(self, woken: set[tuple[str, int]], where: _Where) -> typed.FetchResponse | None:
        """After a wake-up: read again only the ``woken`` partitions (their old answers'
        regions released), then the body as ``answer`` gives it, or None to park on."""
        ctx, request = self.ctx, self.request
        error = False
        for key in woken:
            found = where.get(key)
            if found is None:
                continue
            answers, index, part = found
            old = answers[index]
            records = old["records"]
            old_size = 0
            if records:
                # Records the reads put in an answer: a FileRegion or bytes (never a list).
                if type(records) is FileRegion:
                    old_size = records.size
                    _release_region(ctx, records)
                else:
                    old_size = len(records)  # type: ignore[arg-type]
            others = self.available - old_size
            budget = request.max_bytes - others if ctx.api_version >= 3 else INT32_MAX
            answer, size, failed = read_partition(ctx, key[0], part, request.replica_id, budget, others == 0,
                                                  False, self.read_committed, self.client_rack)
            answers[index] = answer
            self.available = others + size
            if failed:
                error = True
        return self._body(self.responses, self.available) if self._done(error) else None

    def _body(self, responses: list[typed.FetchableTopicResponse], available: int) -> typed.FetchResponse:
        ctx, request, broker = self.ctx, self.request, self.ctx.broker
        throttle_ms = 0
        if request.replica_id < 0 and broker.quotas.active:
            throttle_ms = ctx.charge(CONSUMER_BYTE_RATE, available)
        if available:
            count_bytes_out(broker.replica_manager.topic_stats, responses, request.replica_id >= 0)
        session = self.session
        if session is not None:
            responses = session_answer(session.partitions, responses, request.session_id != NO_SESSION)
        if self.unknown:
            responses = [*responses, *self.unknown]
        return {"throttle_time_ms": throttle_ms, "error_code": ErrorCode.NONE,
                "session_id": session.session_id if session is not None else NO_SESSION,
                "responses": responses}

    async def parked(self) -> typed.FetchResponse:
        request = self.request
        # Where each partition's answer is: parking (and unparking) walks the partitions
        # once; a wake-up touches only those appended to.
        where: _Where = {}
        for topic, answer in zip(self.topics, self.responses, strict=True):
            answers = cast("list[typed.FetchResponsePartitionData]", answer["partitions"])
            for index, part in enumerate(topic.partitions):
                where[topic.topic, part.partition] = (answers, index, part)
        # A follower waits for the leader's log to grow; a consumer for the high watermark.
        waiters = self.ctx.broker.replica_manager.fetch_waiters(request.replica_id)
        loop = self.loop = asyncio.get_running_loop()
        self.deadline = loop.time() + request.max_wait_ms / 1000
        parked = waiters.park(where)
        if waiters.notified != self.notified_before:
            # Appends landed between the first read and this park, unheard: read every
            # partition again once rather than wait out max_wait_ms past data.
            parked.woken.update(where)
        try:
            while True:
                await parked.wait(self.deadline - loop.time())
                body = self.reread(parked.take(), where)
                if body is not None:
                    return body
        finally:
            parked.close()


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
            "partitions": [partition_error(p, ErrorCode.UNKNOWN_TOPIC_ID) for p in partitions]}


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


def _denied_topics(ctx: RequestContext, replica_id: int, topics: Sequence[ReadTopic]) -> frozenset[str]:
    """Topics this fetch may not read: all of them for a follower without CLUSTER_ACTION
    on the cluster, else those without READ."""
    names = {t.topic for t in topics}
    if replica_id >= 0:
        return frozenset() if ctx.allowed_on_cluster(Operation.CLUSTER_ACTION) else frozenset(names)
    return frozenset(n for n in names if not ctx.allowed(Operation.READ, ResourceType.TOPIC, n))


fetch_path.configure(KafkaError, _preferred_read_replica, ErrorCode.NONE, ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                     ErrorCode.OFFSET_OUT_OF_RANGE)


def _release_region(ctx: RequestContext, region: FileRegion) -> None:
    """Ends the hold of a region read before (a partition read again after a wake-up)."""
    for index, pinned in enumerate(ctx.pinned):
        if pinned is region:
            del ctx.pinned[index]
            region.release()
            return
