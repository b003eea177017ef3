"""Metadata (key 3): brokers, controller and topic partitions, with auto-creation.

When ``auto.create.topics.enable`` is on and the request allows it (always below v4, the
``allow_auto_topic_creation`` flag from v4), a missing topic is created synchronously and
returned ready, with its partitions and leaders, in this same response: older librdkafka
fails sends to an explicit partition if it first sees LEADER_NOT_AVAILABLE.

From v8 topics (and, v8-v10, the cluster) carry the operations the principal may do on
them when asked; from v10 topics carry their id, and from v12 a request may name a topic
by id alone (UNKNOWN_TOPIC_ID when no topic has it).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from pykfk._core.metadata import encode_partition_states
from pykfk.cluster.metadata import (
    NO_LEADER,
    ClusterView,
    MetadataWriteError,
    PartitionState,
    TopicInfo,
)
from pykfk.cluster.topics import is_internal_topic
from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.protocol.messages import API_SPECS
from pykfk.protocol.types import ZERO_UUID, PreEncoded, Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 3
VERSIONS = (0, 13)
PARTITIONS_FIELD = ("topics", "partitions")  # encoded apart, in compiled code (pykfk._core.metadata)
# AclOperation codes a principal may be told it has on a topic, and on the cluster.
TOPIC_OPERATIONS = (Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
                    Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS)
CLUSTER_OPERATIONS = (Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
                      Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE)


_SPEC = API_SPECS[API_KEY]


def decode_request(view: memoryview, offset: int, version: int) -> Struct:
    """The declared layout; bytes after it are ignored, as Kafka ignores them: librdkafka
    2.16 sends its all-topics Metadata v10+ with the topics count as a 4-byte
    placeholder it never rewrote, which reads as a null (all topics) compact array
    followed by three stray bytes."""
    value, _end = _SPEC.request_decoder(version)(view, offset)
    return value


def topic_uuid(info: TopicInfo) -> uuid.UUID:
    """The topic's id as the protocol carries it (stored as 32 hex digits)."""
    try:
        return uuid.UUID(hex=info.topic_id)
    except ValueError:
        return ZERO_UUID


def _names(store: ClusterView, requested: Sequence[typed.MetadataRequestTopic]
           ) -> tuple[list[str], dict[str, uuid.UUID]]:
    """The requested topic names, a topic named by id alone (v12) resolved to its name;
    ids that name no topic are returned apart (keyed by a placeholder)."""
    names: list[str] = []
    unknown_ids: dict[str, uuid.UUID] = {}
    for topic in requested:
        if topic.name is not None:
            names.append(topic.name)
            continue
        name = topic_ids(store).name_of(topic.topic_id)
        if name is None:
            unknown_ids[f"\0{topic.topic_id}"] = topic.topic_id
        else:
            names.append(name)
    return names, unknown_ids


def topic_operations(ctx: RequestContext, name: str) -> int:
    return sum(1 << int(op) for op in TOPIC_OPERATIONS if ctx.allowed(op, ResourceType.TOPIC, name))


class TopicIds:
    """Topic id -> name of the store's topics, rebuilt (once) after a topic came, went
    or changed: Fetch v13+ names topics by id on every request."""

    def __init__(self, store: ClusterView):
        self.store = store
        self._by_id: dict[uuid.UUID, str] | None = None
        store.add_listener(self._changed)

    def _changed(self, kind: str, _key: object) -> None:
        if kind in ("topic", "delete_topic"):
            self._by_id = None

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        if self._by_id is None:
            self._by_id = {topic_uuid(info): name for name, info in self.store.topics().items()}
        return self._by_id.get(topic_id)

    def id_of(self, name: str) -> uuid.UUID:
        info = self.store.get_topic(name)
        return ZERO_UUID if info is None else topic_uuid(info)


_STORE_CACHES: weakref.WeakKeyDictionary[ClusterView, dict[Any, Any]] = weakref.WeakKeyDictionary()
StoreCache = TypeVar("StoreCache")


def store_cache(kind: Callable[[ClusterView], StoreCache], store: ClusterView) -> StoreCache:
    """The one ``kind`` cache of ``store`` (made on first use; it listens to the store
    for what makes it stale)."""
    caches = _STORE_CACHES.setdefault(store, {})
    found = caches.get(kind)
    if found is None:
        found = caches[kind] = kind(store)
    return cast(StoreCache, found)


def topic_ids(store: ClusterView) -> TopicIds:
    return store_cache(TopicIds, store)


class _TopicView:
    """One topic as the cache keeps it: the store's state object of each partition, in
    partition order, and the encoded partitions array per response version."""

    __slots__ = ("encoded", "states", "topic_id")

    def __init__(self, topic_id: str, states: list[PartitionState | None]):
        self.topic_id = topic_id
        self.states = states
        self.encoded: dict[int, PreEncoded] = {}


class EncodedPartitions:
    """The encoded partitions array of each topic per response version, kept up to date
    from the store's announcements instead of rebuilt from it: the cache holds each
    topic's partition states (references to the store's own objects, one list per topic)
    and replaces the one state a "partition" change names, reads only the new
    partitions when a topic grows, and drops a topic when it goes or is replaced. Any
    change to a topic or the brokers drops that topic's (or every) encoding; the next
    Metadata encodes from the kept states in compiled code
    (``pykfk._core.metadata.encode_partition_states``), with no per-partition Python
    step: the first Metadata of a new 10,000-partition topic costs about a millisecond.

    Nor does it make a GC-tracked object per partition. A broker that has just created
    thousands of partitions has grown its heap, so a full collection (100-200 ms with
    10,000 partitions) is due soon; a request that allocates thousands of tuples is where
    it lands. gc.freeze() after a creation would make full collections cheap but keeps
    every object alive at that moment out of the collector for good, garbage included,
    and the logs of a topic deleted later would never be collected: a leak an operator
    cannot see or bound, to shift a pause; so the cold path allocates nothing the
    collector counts instead."""

    def __init__(self, store: ClusterView):
        self.store = store
        self.topics: dict[str, _TopicView] = {}
        store.add_listener(self._changed)

    def _changed(self, kind: str, key: object) -> None:
        if kind == "partition" and isinstance(key, tuple):
            name, partition = key
            view = self.topics.get(name)
            if view is not None:
                if 0 <= partition < len(view.states):
                    view.states[partition] = self.store.partition_state(name, partition)
                    view.encoded.clear()
                else:  # a partition the topic did not have when read: read it again
                    del self.topics[name]
        elif kind == "topic" and isinstance(key, str):
            self._topic_changed(key)
        elif kind == "delete_topic" and isinstance(key, str):
            view = self.topics.get(key)
            if view is not None:
                view.encoded.clear()
        elif kind == "broker":
            for view in self.topics.values():  # offline replicas: every topic's encoding
                view.encoded.clear()
        elif kind in ("quota", "acl", "broker_config", "controller", "controlled_shutdown"):
            pass  # not part of a Metadata answer
        else:
            self.topics.clear()  # the session, anything else: read everything again

    def _topic_changed(self, name: str) -> None:
        """A topic came, went or changed (partitions, assignment, configs): states are
        read now for a new topic (this is the creation's cost, not its first
        Metadata's) and for a grown one's new partitions."""
        info = self.store.get_topic(name)
        view = self.topics.get(name)
        if info is None:
            self.topics.pop(name, None)
        elif view is None or view.topic_id != info.topic_id:
            self.topics[name] = _TopicView(info.topic_id, self.store.topic_states(name, 0, info.partitions))
        else:
            states = view.states
            if info.partitions > len(states):
                states += self.store.topic_states(name, len(states), info.partitions)
            else:
                del states[info.partitions:]
            view.encoded.clear()  # the assignment may have changed

    def get(self, info: TopicInfo, version: int, me: int) -> PreEncoded:
        view = self.topics.get(info.name)
        if view is None or view.topic_id != info.topic_id or len(view.states) != info.partitions:
            states = self.store.topic_states(info.name, 0, info.partitions)
            view = self.topics[info.name] = _TopicView(info.topic_id, states)
        encoded = view.encoded.get(version)
        if encoded is None:
            live = self.store.live_broker_ids()
            encoded = view.encoded[version] = PreEncoded(
                encode_partition_states(version, view.states, info.assignment, (me,), live))
        return encoded


def encoded_partitions(store: ClusterView) -> EncodedPartitions:
    return store_cache(EncodedPartitions, store)


async def handle(ctx: RequestContext, request: typed.MetadataRequest) -> typed.MetadataResponse:
    broker = ctx.broker
    version = ctx.api_version
    store = broker.metadata
    requested = request.topics
    authorizer = broker.authorizer
    unknown_ids: dict[str, uuid.UUID] = {}
    if requested is None or (version == 0 and not requested):
        names = sorted(store.topics())  # null (v1+) or empty (v0): every topic
        if authorizer is not None:  # a listing shows only what the principal may describe
            names = [n for n in names if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)]
        allow_create = False
    else:
        names, unknown_ids = _names(store, requested)
        allow_create = broker.config.auto_create_topics_enable and (
            version < 4 or request.allow_auto_topic_creation
        )
    partitions = encoded_partitions(store)
    topics: list[typed.MetadataResponseTopic] = [
        {"error_code": ErrorCode.UNKNOWN_TOPIC_ID, "name": None, "topic_id": topic_id, "partitions": []}
        for topic_id in unknown_ids.values()] if requested else []
    for name in dict.fromkeys(names):  # keep order, drop duplicates
        if authorizer is not None and not _may_see(ctx, name, allow_create and store.get_topic(name) is None):
            topics.append({"error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED, "name": name, "is_internal": False,
                           "partitions": []})
            continue
        info = store.get_topic(name)
        code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if info is None and is_internal_topic(name):
            # Kafka creates its internal topic when named, always with its own settings
            # (compacted, offsets.topic.num.partitions), never with the topic defaults.
            try:
                await broker.ensure_offsets_topic()
            except MetadataWriteError as exc:
                code = exc.code
            info = store.get_topic(name)
        if info is None and allow_create and code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:  # not after a failure
            try:
                info = await broker.topics.auto_create(name)
            except KafkaError as exc:
                code = exc.code
                if code == ErrorCode.TOPIC_ALREADY_EXISTS:  # pragma: no cover - checked above
                    info = store.get_topic(name)
        if info is None:
            topics.append({"error_code": code, "name": name, "is_internal": False, "partitions": []})
            continue
        entry: typed.MetadataResponseTopic = {
            "error_code": ErrorCode.NONE,
            "name": name,
            "topic_id": topic_uuid(info),
            "is_internal": is_internal_topic(name),
            # The array encoded ahead (PreEncoded), which the codec writes as is.
            "partitions": cast("list[typed.MetadataResponsePartition]", partitions.get(info, version, broker.broker_id)),
        }
        if version >= 8 and request.include_topic_authorized_operations:
            entry["topic_authorized_operations"] = topic_operations(ctx, name)
        topics.append(entry)
    body: typed.MetadataResponse = {
        "throttle_time_ms": 0,
        "brokers": _brokers(store, ctx.session.listener_name),
        "cluster_id": store.cluster_id,
        "controller_id": store.controller_id(),
        "topics": topics,
        # v13 (KIP-1102): a top-level error such as REBOOTSTRAP_REQUIRED; none to report.
        "error_code": ErrorCode.NONE,
    }
    if 8 <= version <= 10 and request.include_cluster_authorized_operations:
        body["cluster_authorized_operations"] = sum(
            1 << int(op) for op in CLUSTER_OPERATIONS if ctx.allowed_on_cluster(op))
    return body


def _may_see(ctx: RequestContext, name: str, creating: bool) -> bool:
    """DESCRIBE on the topic; auto-creating it also needs CREATE on the cluster or it."""
    if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
        return False
    return not creating or ctx.allowed_on_cluster(Operation.CREATE) or ctx.allowed(
        Operation.CREATE, ResourceType.TOPIC, name)


def _brokers(store: ClusterView, listener: str) -> list[typed.MetadataResponseBroker]:
    """Every broker at its address on the client's listener (Kafka leaves out brokers
    without that listener)."""
    brokers: list[typed.MetadataResponseBroker] = []
    for b in store.brokers():
        address = b.address(listener)
        if address is not None:
            brokers.append({"node_id": b.node_id, "host": address[0], "port": address[1], "rack": b.rack})
    return brokers


# The fields of a partition entry, in the order of the tuples partition_entries gives.
PARTITION_FIELDS = ("error_code", "partition_index", "leader_id", "leader_epoch", "replica_nodes", "isr_nodes",
                    "offline_replicas")
PartitionEntry = tuple[int, int, int, int, Sequence[int], Sequence[int], Sequence[int]]


def partition_entries(store: ClusterView, info: TopicInfo, me: int, live: set[int],
                      partitions: range) -> list[PartitionEntry]:
    """Leader, replicas and ISR of ``partitions`` as the metadata store has them (every
    broker answers alike), as tuples in PARTITION_FIELDS order (what
    ``pykfk._core.metadata.encode_partitions`` reads); LEADER_NOT_AVAILABLE while a
    partition has no leader.

    One pass with no per-partition dict or copy: a topic of 10,000 partitions is listed
    on its first Metadata after every change, so this loop is that request's cost."""
    name = info.name
    state_of = store.partition_state
    replicas_of = info.assignment.get
    default = (me,)
    all_live = live.issuperset
    none, no_leader = int(ErrorCode.NONE), int(ErrorCode.LEADER_NOT_AVAILABLE)
    entries: list[PartitionEntry] = []
    append = entries.append
    for p in partitions:
        replicas = replicas_of(p, default)
        offline: Sequence[int] = () if all_live(replicas) else [r for r in replicas if r not in live]
        state = state_of(name, p)
        if state is None:
            append((no_leader, p, NO_LEADER, -1, replicas, (), offline))
        elif state.leader == NO_LEADER:
            append((no_leader, p, NO_LEADER, state.leader_epoch, replicas, state.isr, offline))
        else:
            append((none, p, state.leader, state.leader_epoch, replicas, state.isr, offline))
    return entries


def partition_entry(store: ClusterView, info: TopicInfo, partition: int, me: int, live: set[int]
                    ) -> typed.MetadataResponsePartition:
    """One partition's entry (see partition_entries) as the generic encoder takes it."""
    entry = partition_entries(store, info, me, live, range(partition, partition + 1))[0]
    return cast(typed.MetadataResponsePartition, dict(zip(PARTITION_FIELDS, entry)))
