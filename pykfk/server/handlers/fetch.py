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
import functools
import logging
import uuid
import weakref
from collections.abc import Callable, Coroutine, Sequence

from pykfk._core import fetch_path
from pykfk._core.fetch_path import partition_error
from pykfk._core.wire import decode_fetch
from pykfk.cluster.metadata import ClusterView
from pykfk.cluster.replica import LEADER
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
    ReadTopic,
)
from pykfk.server.handlers.metadata import store_cache, topic_ids

API_KEY = 1
VERSIONS = (0, 18)

log = logging.getLogger("pykfk.server")


# The request body, compiled (``pykfk._core.wire``): the generic decoder's Struct.
decode_request: Callable[[memoryview, int, int], Struct] = decode_fetch


# The response frame as chunks, compiled (``pykfk._core.fetch_path.encode_answer``, bound
# here with no Python frame around it); a body with a field that encoder leaves out
# (tagged fields) goes through the generic encoder.
encode_response: Callable[[int, int, typed.FetchResponse], Chunks] = fetch_path.encode_answer


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


# A parked fetch: the Future of its response frame's chunks (bytes, and FileRegions sent
# with sendfile).
_Parked = asyncio.Future[list[bytes | FileRegion]]


# The handler, compiled (``pykfk._core.fetch_path.handle``, bound here with no Python frame
# around it): the answer at once when the first read has it (data, an error, no wait
# asked); otherwise the parked fetch's loop Future, completed with the encoded answer by
# the wake-up that finishes it (an append, ``max_wait_ms``, a lost leadership, shutdown),
# so a parked fetch costs no task and no coroutine (``Dispatcher._run`` takes the Future
# as the request's work). With request-time quotas (whose handling time the dispatcher
# measures per step) the parked fetch is awaited by ``_answer_later`` instead. The
# functions below are the Python pieces it calls: fetch sessions, topic ids, ACLs.
handle: Callable[[RequestContext, typed.FetchRequest],
                 typed.FetchResponse | _Parked | Coroutine[None, None, typed.FetchResponse]] = fetch_path.handle


def _open_session(ctx: RequestContext, request: typed.FetchRequest, known_as: dict[str, uuid.UUID] | None,
                  unknown: list[typed.FetchableTopicResponse] | None
                  ) -> typed.FetchResponse | tuple[FetchSession | None, Sequence[ReadTopic],
                                                   dict[str, uuid.UUID] | None,
                                                   list[typed.FetchableTopicResponse] | None]:
    """A v7+ fetch that opens, continues or closes a session: the error answer that
    refuses it, or (the session, the topics to read, the topic ids, the answers for
    topics unknown by id)."""
    found = _session(ctx, request)
    if isinstance(found, int):  # an error code: the client starts over with a full fetch
        return {"throttle_time_ms": 0, "error_code": found, "session_id": NO_SESSION, "responses": []}
    session = found
    topics: Sequence[ReadTopic] = request.topics
    if session is not None and known_as is not None:
        session.topic_ids.update(known_as)
        known_as = session.topic_ids
    if session is not None and request.session_id != NO_SESSION:
        topics = session.topics()
        if known_as is not None:
            topics, stale = _split_stale(ctx.broker.metadata, topics, known_as)
            if stale:
                unknown = [*(unknown or ()), *stale]
    return session, topics, known_as, unknown


async def _answer_later(parked: asyncio.Future[typed.FetchResponse]) -> typed.FetchResponse:
    """A parked fetch's body, for the dispatcher's request-time quota path."""
    return await parked


class _TopicNames:
    """Topic id -> name of a store's topics for Fetch v13+ (which names topics by id on
    every request), read by the compiled handler with no Python call: ``by_int`` maps
    each id resolved so far, as its 128-bit int (a dict lookup without ``UUID.__hash__``),
    to its name, and is emptied when a topic comes, goes or changes."""

    def __init__(self, store: ClusterView):
        self.by_int: dict[int, str] = {}
        self._ids = topic_ids(store)
        store.add_listener(self._changed)

    def _changed(self, kind: str, _key: object) -> None:
        if kind in ("topic", "delete_topic"):
            self.by_int.clear()

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        name = self._ids.name_of(topic_id)
        if name is not None:
            self.by_int[topic_id.int] = name
        return name


def _topic_names(store: ClusterView) -> _TopicNames:
    return store_cache(_TopicNames, store)


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
                     ErrorCode.OFFSET_OUT_OF_RANGE, LEADER)
fetch_path.configure_handler(asyncio.get_running_loop, _topic_names, _open_session, _denied_topics,
                             functools.partial(framing.encode_response, API_KEY), _answer_later, CONSUMER_BYTE_RATE,
                             ErrorCode.UNKNOWN_TOPIC_ID)

