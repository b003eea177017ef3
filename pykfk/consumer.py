"""pykfk's consumers, the seeds' two levels in Python style.

- ``SimpleConsumer``: stateless, one request per call against one broker: ``fetch``,
  ``multifetch``, ``get_offsets_before`` (LATEST / EARLIEST).
- ``ConsumerConnector``: the high-level group consumer. ``create_message_streams`` and
  ``create_message_streams_by_filter`` return blocking iterators of ``Message`` fed by
  background fetcher threads; partitions are shared among the group's consumers either
  through the broker's group coordinator (Kafka's classic protocol with the range
  assignor, interoperable with other Kafka clients) or through ZooKeeper as in the seeds
  (``/consumers/<group>/ids|owners|offsets``); offsets are committed automatically or with
  ``commit_offsets()``.

Fetch responses are decoded by the compiled core; a ``Message`` object is made only when
the user takes one.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from pykfk._core.records import DecodedRecords, decode_records
from pykfk.client.cluster_view import ClusterMetadata
from pykfk.client.connection import BrokerConnection, parse_hostport
from pykfk.client.fetcher import (
    EARLIEST,
    FETCH,
    LATEST,
    Chunk,
    ConsumerTimeout,
    Fetcher,
    KafkaStream,
    Message,
    PartitionState,
    fetch_body,
    list_offsets,
)
from pykfk.client.group_member import BrokerGroupMembership, new_consumer_id
from pykfk.errors import ErrorCode, KafkaError, error_code

__all__ = [
    "EARLIEST",
    "LATEST",
    "Blacklist",
    "ConsumerConnector",
    "ConsumerTimeout",
    "FetchRequest",
    "KafkaStream",
    "Message",
    "MessageSet",
    "SimpleConsumer",
    "TopicFilter",
    "Whitelist",
]


if TYPE_CHECKING:
    from typing_extensions import Self

log = logging.getLogger("pykfk.consumer")


# --------------------------------------------------------------- SimpleConsumer


class FetchRequest(NamedTuple):
    """One partition of a ``multifetch``."""

    topic: str
    partition: int
    offset: int
    max_bytes: int = 1024 * 1024


class _State:
    """The topic/partition a MessageSet's messages belong to (no position tracking)."""

    __slots__ = ("active", "deserializers", "partition", "topic")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.deserializers = (None, None)
        self.active = True


class MessageSet:
    """The messages of one partition from one fetch, with their offsets. Iterating it
    yields Message objects; ``next_offset`` is where the following fetch starts,
    ``high_watermark`` the partition's end as the broker saw it. A set whose partition
    had an error raises that KafkaError when iterated (``error`` tells it beforehand)."""

    def __init__(
        self,
        topic: str,
        partition: int,
        records: DecodedRecords | None,
        *,
        offset: int,
        high_watermark: int = -1,
        error: ErrorCode = ErrorCode.NONE,
    ):
        self.topic = topic
        self.partition = partition
        self.error = error
        self.high_watermark = high_watermark
        self._chunk = (
            Chunk(_State(topic, partition), records, high_watermark)
            if records is not None
            else None
        )
        self.next_offset = (
            records.next_offset if records is not None and records.next_offset > offset else offset
        )

    def __len__(self) -> int:
        return 0 if self._chunk is None else len(self._chunk.records)

    def __iter__(self) -> Iterator[Message]:
        if self.error != ErrorCode.NONE:
            raise KafkaError(self.error, f"{self.topic}[{self.partition}]")
        chunk = self._chunk
        if chunk is None:
            return iter(())
        return map(Message, [chunk] * len(chunk.records), range(len(chunk.records)))

    def __getitem__(self, i: int) -> Message:
        if self._chunk is None:
            raise IndexError(i)
        n = len(self._chunk.records)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        return Message(self._chunk, i)

    @property
    def offsets(self) -> list[int]:
        return [] if self._chunk is None else list(self._chunk.records.offsets)

    def __repr__(self) -> str:
        return f"MessageSet({self.topic}[{self.partition}], {len(self)} messages, next_offset={self.next_offset})"


class SimpleConsumer:
    """Stateless consumer of one broker (the seeds' SimpleConsumer(host, port, soTimeout,
    bufferSize)): every call is one request; no group, no offsets kept.

    ``SimpleConsumer("127.0.0.1", 9092)`` or ``SimpleConsumer("127.0.0.1:9092")``.
    """

    LATEST = LATEST
    EARLIEST = EARLIEST

    def __init__(
        self,
        host: str,
        port: int | None = None,
        *,
        socket_timeout_ms: int = 30000,
        client_id: str = "pykfk-simple-consumer",
        max_wait_ms: int = 0,
    ):
        if port is None:
            host, port = parse_hostport(host)
        self.max_wait_ms = max_wait_ms
        self._conn = BrokerConnection(
            host,
            port,
            client_id=client_id,
            request_timeout=socket_timeout_ms / 1000,
            connect_timeout=socket_timeout_ms / 1000,
        )

    def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int = 1024 * 1024
    ) -> MessageSet:
        """Messages of ``topic[partition]`` from ``offset`` on, up to about ``max_bytes``
        (at least one whole batch). Raises KafkaError on a partition error such as
        OFFSET_OUT_OF_RANGE."""
        result = self.multifetch([FetchRequest(topic, partition, offset, max_bytes)])[0]
        if result.error != ErrorCode.NONE:
            raise KafkaError(result.error, f"fetch {topic}[{partition}] at {offset}")
        return result

    def multifetch(
        self, requests: Sequence[FetchRequest | tuple[str, int, int] | tuple[str, int, int, int]]
    ) -> list[MessageSet]:
        """Several partitions in one request; results in request order, each with its own
        ``error``."""
        reqs = [r if isinstance(r, FetchRequest) else FetchRequest(*r) for r in requests]
        if len({(r.topic, r.partition) for r in reqs}) != len(reqs):
            raise ValueError("a partition may appear only once in a multifetch")
        body = fetch_body(
            [(r.topic, r.partition, r.offset, r.max_bytes) for r in reqs],
            self.max_wait_ms,
            0,
            sum(r.max_bytes for r in reqs) or 1,
        )
        self._conn.connect()
        response = self._conn.request(
            FETCH, body, timeout=self.max_wait_ms / 1000 + self._conn.request_timeout
        )
        parts = {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}
        out = []
        for r in reqs:
            part = parts.get((r.topic, r.partition))
            if part is None:
                out.append(
                    MessageSet(
                        r.topic,
                        r.partition,
                        None,
                        offset=r.offset,
                        error=ErrorCode.UNKNOWN_SERVER_ERROR,
                    )
                )
                continue
            code = error_code(part.error_code)
            if code != ErrorCode.NONE:
                out.append(MessageSet(r.topic, r.partition, None, offset=r.offset, error=code))
                continue
            records = decode_records(part.records, r.offset) if part.records else None
            out.append(
                MessageSet(
                    r.topic,
                    r.partition,
                    records,
                    offset=r.offset,
                    high_watermark=part.high_watermark,
                )
            )
        return out

    def get_offsets_before(
        self, topic: str, partition: int, time: int, max_num_offsets: int = 1
    ) -> list[int]:
        """Up to ``max_num_offsets`` offsets (segment starts, newest first, then the log
        end) before ``time`` in ms, or for ``LATEST`` (-1: the log end offset) /
        ``EARLIEST`` (-2: the log start offset)."""
        self._conn.connect()
        return list_offsets(self._conn, topic, partition, time, max_num_offsets)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ filters


class TopicFilter:
    """A topic regex as the seeds take it: commas mean "or", blanks and quotes around it
    are ignored; a topic matches when the whole name matches."""

    # How the ZooKeeper registration names the filter (Whitelist / Blacklist).
    pattern_name: ClassVar[str]

    def __init__(self, regex: str):
        cleaned = regex.strip().replace(",", "|").replace(" ", "").strip("\"'")
        self.regex = cleaned
        self.pattern = re.compile(cleaned)

    def matches(self, topic: str, exclude_internal: bool = True) -> bool:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.regex!r})"


class Whitelist(TopicFilter):
    """Topics whose names match the regex."""

    pattern_name = "white_list"

    def matches(self, topic: str, exclude_internal: bool = True) -> bool:
        if exclude_internal and topic.startswith("__"):
            return False
        return self.pattern.fullmatch(topic) is not None


class Blacklist(TopicFilter):
    """Topics whose names do not match the regex."""

    pattern_name = "black_list"

    def matches(self, topic: str, exclude_internal: bool = True) -> bool:
        if exclude_internal and topic.startswith("__"):
            return False
        return self.pattern.fullmatch(topic) is None


# --------------------------------------------------------- ConsumerConnector

_RESETS = {"smallest": EARLIEST, "earliest": EARLIEST, "largest": LATEST, "latest": LATEST}


class ConsumerConnector:
    """A member of consumer group ``group_id`` (the seeds' ConsumerConnector).

    Brokers come from ``bootstrap_servers`` or ``zk_connect``. ``coordination``:
    ``"broker"`` (Kafka's group coordinator, the default when bootstrap_servers is given)
    or ``"zookeeper"`` (the seeds' ZooKeeper registry; needs zk_connect; the default when
    only zk_connect is given).

    Call ``create_message_streams({topic: n})`` or ``create_message_streams_by_filter(
    Whitelist(regex) | Blacklist(regex), n)`` once; iterate the streams (each from one
    thread). ``auto_commit_enable`` commits consumed offsets every
    ``auto_commit_interval_ms`` and at shutdown and rebalances; ``commit_offsets()``
    commits now. ``auto_offset_reset``: where to start without a committed offset
    (``"largest"``/``"latest"`` or ``"smallest"``/``"earliest"``). ``consumer_timeout_ms``
    >= 0 ends a stream's loop after that long without messages. ``shutdown()`` (or the
    context manager) stops fetching, commits, leaves the group and ends the streams.
    """

    def __init__(
        self,
        group_id: str,
        bootstrap_servers: str | list[str] | None = None,
        *,
        zk_connect: str | None = None,
        coordination: str | None = None,
        consumer_id: str | None = None,
        client_id: str = "pykfk-consumer",
        auto_commit_enable: bool = True,
        auto_commit_interval_ms: int = 5000,
        auto_offset_reset: str = "largest",
        consumer_timeout_ms: float = -1,
        fetch_size: int = 1024 * 1024,
        fetch_wait_max_ms: int = 100,
        fetch_min_bytes: int = 1,
        queued_max_chunks: int = 10,
        session_timeout_ms: int = 10000,
        heartbeat_interval_ms: int = 1000,
        rebalance_timeout_ms: int = 30000,
        rebalance_max_retries: int = 4,
        rebalance_backoff_ms: int = 2000,
        topic_refresh_interval_ms: int = 5000,
        request_timeout_ms: int = 30000,
        exclude_internal_topics: bool = True,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
        zk_session_timeout_ms: int = 6000,
    ):
        if coordination is None:
            coordination = "broker" if bootstrap_servers else "zookeeper"
        if coordination not in ("broker", "zookeeper"):
            raise ValueError("coordination must be 'broker' or 'zookeeper'")
        if coordination == "zookeeper" and not zk_connect:
            raise ValueError("ZooKeeper coordination needs zk_connect")
        if auto_offset_reset not in _RESETS:
            raise ValueError(f"auto_offset_reset must be one of {sorted(_RESETS)}")
        self.group_id = group_id
        self.coordination = coordination
        self.consumer_id = consumer_id or new_consumer_id(group_id)
        self.auto_commit = auto_commit_enable
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self.reset_to = _RESETS[auto_offset_reset]
        self.consumer_timeout_ms = consumer_timeout_ms
        self.fetch_size = fetch_size
        self.fetch_wait_max_ms = fetch_wait_max_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.queued_max_chunks = queued_max_chunks
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.topic_refresh_interval = topic_refresh_interval_ms / 1000
        self.exclude_internal_topics = exclude_internal_topics
        self.deserializers = (key_deserializer, value_deserializer)
        self.cluster = ClusterMetadata(
            bootstrap_servers,
            zk_connect=zk_connect,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            zk_session_timeout_ms=zk_session_timeout_ms,
        )
        self.membership: Any
        if coordination == "broker":
            self.membership = BrokerGroupMembership(
                self.cluster,
                group_id,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                retry_backoff_ms=200,
                client_id=client_id,
            )
        else:
            from pykfk.client.zk_group import ZkGroupMembership

            self.membership = ZkGroupMembership(
                self.cluster,
                group_id,
                self.consumer_id,
                on_change=self._request_rebalance,
                rebalance_max_retries=rebalance_max_retries,
                rebalance_backoff_ms=rebalance_backoff_ms,
                exclude_internal_topics=exclude_internal_topics,
            )
            self.cluster.add_listener(
                lambda kind: (
                    self._request_rebalance() if kind == "brokers" or self._filter else None
                )
            )
        self._lock = threading.RLock()
        self._static: dict[str, list[KafkaStream]] = {}
        self._filter: tuple[TopicFilter, list[KafkaStream]] | None = None
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._fetchers: list[Fetcher] = []
        self._topics: list[str] = []
        self._need_rebalance = False
        self._leaders_changed = False
        self._wake = threading.Event()
        self._rebalanced = threading.Condition()
        self._generation = 0
        self._closing = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self.last_error: BaseException | None = None

    # ---------------------------------------------------------------- streams

    def create_message_streams(
        self, topic_count: dict[str, int], *, timeout: float = 60
    ) -> dict[str, list[KafkaStream]]:
        """``{topic: n}`` -> ``{topic: [n streams]}``; returns after the first rebalance."""
        self._check_new_subscription()
        for topic, n in topic_count.items():
            if n < 1:
                raise ValueError("each topic needs at least one stream")
            self._static[topic] = [self._new_stream(f"{topic}-{i}") for i in range(n)]
        self._start(timeout)
        return {t: list(s) for t, s in self._static.items()}

    def create_message_streams_by_filter(
        self, topic_filter: TopicFilter, num_streams: int = 1, *, timeout: float = 60
    ) -> list[KafkaStream]:
        """``n`` streams carrying every topic the filter matches, now or later."""
        self._check_new_subscription()
        if num_streams < 1:
            raise ValueError("num_streams must be at least 1")
        self._filter = (
            topic_filter,
            [self._new_stream(f"{topic_filter.regex}-{i}") for i in range(num_streams)],
        )
        self._start(timeout)
        return list(self._filter[1])

    def _new_stream(self, name: str) -> KafkaStream:
        return KafkaStream(self.queued_max_chunks, self.consumer_timeout_ms, name)

    def _check_new_subscription(self) -> None:
        if self._closing:
            raise RuntimeError("consumer connector is shut down")
        if self._static or self._filter:
            raise RuntimeError("message streams were already created for this connector")

    def _start(self, timeout: float) -> None:
        if self.coordination == "zookeeper":
            if self._filter:
                f, streams = self._filter
                self.membership.register({f.regex: len(streams)}, f.pattern_name)
            else:
                self.membership.register({t: len(s) for t, s in self._static.items()})
        self._need_rebalance = True
        self._thread = threading.Thread(
            target=self._run, name=f"pykfk-consumer-{self.group_id}", daemon=True
        )
        self._thread.start()
        self.wait_for_assignment(timeout)

    def wait_for_assignment(self, timeout: float = 60, after: int = 0) -> bool:
        """Block until more than ``after`` rebalances have completed (by default: the
        first one). False on timeout or shutdown."""
        deadline = time.monotonic() + timeout
        with self._rebalanced:
            while self._generation <= after:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closing:
                    return False
                self._rebalanced.wait(remaining)
        return True

    @property
    def generation(self) -> int:
        """How many rebalances this connector has completed."""
        return self._generation

    def assignment(self) -> list[tuple[str, int]]:
        """The (topic, partition) pairs this consumer currently owns."""
        with self._lock:
            return sorted(self._states)

    # --------------------------------------------------------------- offsets

    def commit_offsets(self) -> None:
        """Commit the offset after the last message taken from each owned partition."""
        with self._lock:
            pending = {
                tp: s.consumed
                for tp, s in self._states.items()
                if s.consumed != s.committed and s.consumed >= 0
            }
            states = dict(self._states)
        if not pending:
            return
        self.membership.commit(pending)
        for tp, offset in pending.items():
            states[tp].committed = offset

    def _auto_commit(self) -> None:
        try:
            self.commit_offsets()
        except Exception as exc:  # noqa: BLE001 - retried at the next interval
            log.warning("auto-commit for group %s failed: %s", self.group_id, exc)

    # ---------------------------------------------------------- coordination

    def _request_rebalance(self) -> None:
        self._need_rebalance = True
        self._wake.set()

    def _on_leader_change(self) -> None:
        self._leaders_changed = True
        self._wake.set()

    def _run(self) -> None:
        next_heartbeat = next_commit = next_topic_check = 0.0
        failures = 0
        try:
            while not self._closing:
                now = time.monotonic()
                if self._need_rebalance:
                    self._need_rebalance = False
                    try:
                        self._rebalance()
                        failures = 0
                    except Exception as exc:  # noqa: BLE001 - best effort while closing or cleaning up
                        failures += 1
                        self.last_error = exc
                        log.warning(
                            "rebalance of group %s failed (%s); retrying", self.group_id, exc
                        )
                        self._need_rebalance = True
                        self._wake.wait(min(0.2 * failures, 2.0))
                        continue
                    now = time.monotonic()
                    next_commit = now + self.auto_commit_interval
                    next_heartbeat = now + self.heartbeat_interval
                    next_topic_check = now + self.topic_refresh_interval
                if self.coordination == "broker" and now >= next_heartbeat:
                    if self.membership.heartbeat():
                        self._need_rebalance = True
                        continue
                    next_heartbeat = now + self.heartbeat_interval
                if self._filter is not None and now >= next_topic_check:
                    next_topic_check = now + self.topic_refresh_interval
                    try:
                        if self._subscribed_topics() != self._topics:
                            self._need_rebalance = True
                            continue
                    except KafkaError as exc:
                        log.debug("topic refresh failed: %s", exc)
                if self._leaders_changed:
                    self._leaders_changed = False
                    self._restart_fetchers()
                if self.auto_commit and now >= next_commit:
                    self._auto_commit()
                    next_commit = now + self.auto_commit_interval
                waits = [
                    next_heartbeat if self.coordination == "broker" else now + 1.0,
                    next_commit if self.auto_commit else now + 1.0,
                ]
                if self._filter is not None:
                    waits.append(next_topic_check)
                self._wake.wait(max(0.0, min(waits) - time.monotonic()))
                self._wake.clear()
        finally:
            self._stop_fetchers()
            if self.auto_commit:
                self._auto_commit()
            try:
                self.membership.leave()
            except Exception as exc:  # noqa: BLE001 - best effort while closing or cleaning up
                log.debug("leaving group %s: %s", self.group_id, exc)

    def _all_topic_names(self) -> list[str]:
        """Topics in ZooKeeper's registry (when used) and those the brokers report."""
        names = set()
        if self.cluster.zk is not None:
            names.update(self.cluster.list_topics())
        self.cluster.refresh(None)
        names.update(self.cluster.topics)
        return sorted(names)

    def _subscribed_topics(self) -> list[str]:
        topics = set(self._static)
        if self._filter is not None:
            names = self._all_topic_names()
            topic_filter = self._filter[0]
            topics.update(t for t in names if topic_filter.matches(t, self.exclude_internal_topics))
        return sorted(topics)

    def _streams_for(self, topic: str) -> list[KafkaStream]:
        streams = self._static.get(topic)
        if streams is not None:
            return streams
        assert self._filter is not None
        return self._filter[1]

    def _rebalance(self) -> None:
        # 1. stop fetching, commit what was consumed, forget queued chunks
        self._stop_fetchers()
        if self.auto_commit:
            self._auto_commit()
        with self._lock:
            previous = self._states
            for state in previous.values():
                state.active = False
            self._states = {}
        for stream in self._all_streams():
            stream.clear()
        # 2. agree on the new assignment
        topics = self._subscribed_topics()
        if self.coordination == "broker":
            assigned = self.membership.join(topics)
            threads = None
        else:
            self._topics = topics
            owned = self.membership.rebalance(self._all_topic_names)
            assigned = sorted(owned)
            threads = {tp: int(thread.rsplit("-", 1)[1]) for tp, thread in owned.items()}
        # 3. starting offsets: kept partitions go on from where the user is
        kept = {tp: previous[tp].consumed for tp in assigned if tp in previous}
        fresh = [tp for tp in assigned if tp not in kept]
        committed = self.membership.fetch_offsets(fresh) if fresh else {}
        by_topic: dict[str, list[int]] = {}
        for t, p in assigned:
            by_topic.setdefault(t, []).append(p)
        states = {}
        for topic, partitions in by_topic.items():
            streams = self._streams_for(topic)
            for i, partition in enumerate(sorted(partitions)):
                tp = (topic, partition)
                index = threads[tp] if threads is not None else i
                stream = streams[index % len(streams)]
                offset = kept.get(tp, committed.get(tp, -1))
                state = PartitionState(topic, partition, stream, offset, self.deserializers)
                state.committed = offset if tp not in kept else previous[tp].committed
                states[tp] = state
        for state in states.values():
            if state.fetch_offset < 0:
                self._reset_offset(state)
                state.committed = -1
        with self._lock:
            self._states = states
            self._topics = topics
        self._start_fetchers()
        log.info("consumer %s of group %s owns %s", self.consumer_id, self.group_id, sorted(states))
        with self._rebalanced:
            self._generation += 1
            self._rebalanced.notify_all()

    def _reset_offset(self, state: PartitionState) -> None:
        """Where to start without a usable offset: the log start or end."""
        try:
            leader = self.cluster.leader(state.topic, state.partition)
            offsets = list_offsets(
                self.cluster.connection(leader), state.topic, state.partition, self.reset_to
            )
        except KafkaError as exc:
            log.warning(
                "cannot look up the %s offset of %s[%d]: %s",
                "earliest" if self.reset_to == EARLIEST else "latest",
                state.topic,
                state.partition,
                exc,
            )
            offsets = []
        offset = offsets[0] if offsets else 0
        state.fetch_offset = state.consumed = offset

    def _all_streams(self) -> list[KafkaStream]:
        streams = [s for ss in self._static.values() for s in ss]
        if self._filter is not None:
            streams += self._filter[1]
        return streams

    def _start_fetchers(self) -> None:
        by_leader: dict[int, list[PartitionState]] = {}
        with self._lock:
            states = list(self._states.values())
        if states:
            self.cluster.refresh(sorted({s.topic for s in states}))
        for state in states:
            info = self.cluster.topics.get(state.topic)
            leader = info.leaders.get(state.partition, -1) if info else -1
            if leader < 0:
                self._leaders_changed = True  # try again shortly
                continue
            by_leader.setdefault(leader, []).append(state)
        fetchers = [
            Fetcher(
                self.cluster,
                node,
                node_states,
                fetch_size=self.fetch_size,
                max_wait_ms=self.fetch_wait_max_ms,
                min_bytes=self.fetch_min_bytes,
                reset_offset=self._reset_offset,
                on_leader_change=self._on_leader_change,
            )
            for node, node_states in by_leader.items()
        ]
        for fetcher in fetchers:
            fetcher.start()
        self._fetchers = fetchers

    def _stop_fetchers(self) -> None:
        fetchers, self._fetchers = self._fetchers, []
        for fetcher in fetchers:
            fetcher.stop()
        for fetcher in fetchers:
            fetcher.join(30)

    def _restart_fetchers(self) -> None:
        """Leaders moved: fetch each partition from its new leader, from where the user is."""
        self._stop_fetchers()
        with self._lock:
            for tp, state in list(self._states.items()):
                state.active = False
                fresh = PartitionState(
                    state.topic, state.partition, state.stream, state.consumed, self.deserializers
                )
                fresh.committed = state.committed
                self._states[tp] = fresh
        for stream in self._all_streams():
            stream.clear()
        self._start_fetchers()

    # --------------------------------------------------------------- closing

    def shutdown(self, timeout: float = 30) -> None:
        """Stop fetching, commit consumed offsets (with auto-commit), leave the group and
        end every stream's iteration."""
        if self._closed:
            return
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        else:
            self.membership.leave()
        for stream in self._all_streams():
            stream.close()
        with self._rebalanced:
            self._rebalanced.notify_all()
        self.membership.close()
        self.cluster.close()
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
