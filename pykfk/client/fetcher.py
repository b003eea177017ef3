"""Consumer internals: messages as lazy views over decoded fetch data, per-partition
positions, the streams users iterate and the background fetcher threads feeding them
(the seeds' PartitionTopicInfo, FetchedDataChunk, KafkaStream and FetcherRunnable).

A Fetch response's record bytes are decoded by the compiled core
(``decode_records``: columnar offsets, timestamps and key/value spans); a Python object
per record is made only when the user takes the message.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from pykfk._core.records import DecodedRecords, decode_records
from pykfk.client.cluster_view import REFRESH_ERRORS, ClusterMetadata
from pykfk.client.connection import BrokerConnection
from pykfk.client.serializers import Deserializer
from pykfk.errors import ErrorCode, KafkaError, error_code

log = logging.getLogger("pykfk.consumer")

FETCH = 1
LIST_OFFSETS = 2
LATEST = -1
EARLIEST = -2


class PartitionState:
    """One assigned partition: where the fetcher reads next (``fetch_offset``) and the
    offset after the last message handed to the user (``consumed``: what a commit
    stores). ``active`` turns False when the partition is revoked, so queued chunks of it
    are dropped."""

    __slots__ = (
        "active",
        "committed",
        "consumed",
        "deserializers",
        "fetch_offset",
        "partition",
        "stream",
        "topic",
    )

    def __init__(
        self, topic: str, partition: int, stream: KafkaStream, offset: int,
        deserializers: tuple[Deserializer | None, Deserializer | None],
    ):
        self.topic = topic
        self.partition = partition
        self.stream = stream
        self.fetch_offset = offset
        self.consumed = offset
        self.committed = offset
        self.active = True
        self.deserializers = deserializers

    def __repr__(self) -> str:
        return f"PartitionState({self.topic}[{self.partition}] fetch={self.fetch_offset} consumed={self.consumed})"


class Chunk:
    """Decoded records of one partition from one fetch (the seeds' FetchedDataChunk)."""

    __slots__ = (
        "high_watermark",
        "key_deserializer",
        "partition",
        "records",
        "state",
        "topic",
        "value_deserializer",
    )

    def __init__(self, state: Any, records: DecodedRecords, high_watermark: int = -1):
        self.state = state  # a PartitionState, or a consumer's own partition state alike
        self.records = records
        self.topic: str = state.topic
        self.partition: int = state.partition
        self.key_deserializer, self.value_deserializer = state.deserializers
        self.high_watermark = high_watermark


class Message:
    """One consumed record: ``topic``, ``partition``, ``offset``, ``key``, ``value``,
    ``headers`` (list of (str, bytes|None)), ``timestamp`` (ms). Fields are read from the
    decoded fetch data on access; deserializers, when configured, apply to key and value."""

    __slots__ = ("_chunk", "_i")

    def __init__(self, chunk: Chunk, i: int):
        self._chunk = chunk
        self._i = i

    @property
    def topic(self) -> str:
        return self._chunk.topic

    @property
    def partition(self) -> int:
        return self._chunk.partition

    @property
    def offset(self) -> int:
        return self._chunk.records.offsets[self._i]

    @property
    def key(self) -> Any:
        chunk = self._chunk
        key = chunk.records.key(self._i)
        return key if chunk.key_deserializer is None else chunk.key_deserializer(key)

    @property
    def value(self) -> Any:
        chunk = self._chunk
        value = chunk.records.value(self._i)
        return value if chunk.value_deserializer is None else chunk.value_deserializer(value)

    @property
    def headers(self) -> list[tuple[str, bytes | None]]:
        return self._chunk.records.headers(self._i)

    @property
    def timestamp(self) -> int:
        return self._chunk.records.timestamps[self._i]

    @property
    def timestamp_type(self) -> int:
        records = self._chunk.records
        return records.batches[records.batch_index[self._i]].timestamp_type

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
            f"key={self.key!r}, value={_short(self.value)}, timestamp={self.timestamp})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self.offset))

    def _fields(self) -> tuple[object, ...]:
        return (
            self.topic,
            self.partition,
            self.offset,
            self.key,
            self.value,
            self.headers,
            self.timestamp,
        )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_SHUTDOWN: Any = object()  # queued after the chunks: the stream's end


class ConsumerTimeout(Exception):
    """No message arrived within consumer_timeout_ms (the iteration simply ends; this is
    raised only by ``KafkaStream.next_message``)."""


class KafkaStream:
    """A blocking iterator of Messages, fed by fetcher threads through a bounded queue of
    chunks. ``for message in stream`` blocks until messages arrive; with a
    ``consumer_timeout_ms`` (>= 0) the loop ends after that long without a message, and a
    later loop continues where it stopped. The loop also ends at the connector's shutdown.
    One thread should iterate a stream at a time.
    """

    def __init__(self, queued_max_chunks: int, consumer_timeout_ms: float, name: str = ""):
        self.name = name
        self._queue: queue.Queue[Chunk] = queue.Queue(max(1, queued_max_chunks))
        self._timeout = None if consumer_timeout_ms < 0 else consumer_timeout_ms / 1000
        self._chunk: Chunk | None = None
        self._pos = 0
        self._shutdown = False

    def __repr__(self) -> str:
        return f"KafkaStream({self.name})"

    def put(self, chunk: Any, stop: threading.Event) -> bool:
        """Fetcher side: enqueue, waiting for room; False if ``stop`` was set meanwhile."""
        while not stop.is_set():
            try:
                self._queue.put(chunk, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def clear(self) -> None:
        """Drop queued chunks (after a rebalance: their partitions are fetched again)."""
        try:
            while True:
                item = self._queue.get_nowait()
                if item is _SHUTDOWN:
                    self._queue.put_nowait(item)
                    return
        except queue.Empty:
            pass

    def close(self) -> None:
        self._shutdown = True
        self.clear()
        try:
            self._queue.put_nowait(_SHUTDOWN)
        except queue.Full:  # pragma: no cover - cleared just above
            pass

    def _take(self) -> Chunk | None:
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            if self._shutdown and self._queue.empty():
                return None
            try:
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                item = self._queue.get(timeout=timeout)
            except queue.Empty:
                return None
            if item is _SHUTDOWN:
                self._queue.put(item)  # every later loop ends too
                return None
            if item.state.active:
                return item

    def __iter__(self) -> Iterator[Message]:
        while True:
            chunk = self._chunk
            if chunk is None:
                chunk = self._take()
                if chunk is None:
                    return
                self._chunk = chunk
                self._pos = 0
            state = chunk.state
            offsets = chunk.records.offsets
            n = len(offsets)
            i = self._pos
            while i < n and state.active:
                i += 1
                self._pos = i
                state.consumed = offsets[i - 1] + 1
                yield Message(chunk, i - 1)
            self._chunk = None

    def next_message(self) -> Message:
        """One message; ConsumerTimeout when none came in time or the stream is shut down."""
        for message in self:
            return message
        raise ConsumerTimeout()


# ------------------------------------------------------------------ fetching


def fetch_body(
    partitions: list[tuple[str, int, int, int]], max_wait_ms: int, min_bytes: int, max_bytes: int
) -> dict[str, Any]:
    """A sessionless Fetch request for (topic, partition, offset, partition_max_bytes)."""
    topics: dict[str, list[dict[str, int]]] = {}
    for topic, partition, offset, partition_max in partitions:
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "fetch_offset": offset,
                "log_start_offset": -1,
                "partition_max_bytes": partition_max,
            }
        )
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,  # no incremental fetch session (KIP-227)
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def list_offsets(
    conn: BrokerConnection, topic: str, partition: int, timestamp: int, max_num_offsets: int = 1
) -> list[int]:
    """ListOffsets: v0 answers up to max_num_offsets offsets before ``timestamp`` (the
    seeds' getOffsetsBefore); v1+ one offset (the first at or after ``timestamp``, or
    LATEST/EARLIEST)."""
    low = conn.api_versions.get(LIST_OFFSETS, (0, 0))[0]
    use_v0 = max_num_offsets != 1 and low == 0
    version = 0 if use_v0 else conn.version_for(LIST_OFFSETS)
    part = {
        "partition_index": partition,
        "timestamp": timestamp,
        "max_num_offsets": max_num_offsets,
    }
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [part]}],
    }
    response = conn.request(LIST_OFFSETS, body, version=version)
    for t in response.topics:
        for p in t.partitions:
            if p.partition_index != partition:
                continue
            code = error_code(p.error_code)
            if code != ErrorCode.NONE:
                raise KafkaError(code, f"ListOffsets {topic}[{partition}]")
            if version == 0:
                return list(p.old_style_offsets)
            return [] if p.offset < 0 else [p.offset]
    raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "partition missing from ListOffsets response")


class Fetcher(threading.Thread):
    """Fetches the partitions one broker leads and feeds their streams, until stopped."""

    def __init__(
        self,
        cluster: ClusterMetadata,
        node_id: int,
        states: list[PartitionState],
        *,
        fetch_size: int,
        max_wait_ms: int,
        min_bytes: int,
        reset_offset: Callable[[PartitionState], None],
        on_leader_change: Callable[[], None],
        backoff: float = 0.2,
    ):
        super().__init__(name=f"pykfk-fetcher-{node_id}", daemon=True)
        self.cluster = cluster
        self.node_id = node_id
        self.states = states
        self.fetch_size = fetch_size
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.reset_offset = reset_offset
        self.on_leader_change = on_leader_change
        self.backoff = backoff
        self.stop_event = threading.Event()
        self._conn: BrokerConnection | None = None

    def stop(self) -> None:
        self.stop_event.set()

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                try:
                    self._fetch_once()
                except KafkaError as exc:
                    log.debug("fetch from broker %d failed: %s", self.node_id, exc)
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
                    if exc.code in REFRESH_ERRORS:
                        self.on_leader_change()
                    self.stop_event.wait(self.backoff)
        except Exception:  # a bug here must not hang the consumer silently
            log.exception("fetcher for broker %d stopped", self.node_id)
        finally:
            if self._conn is not None:
                self._conn.close()

    def _fetch_once(self) -> None:
        if self._conn is None or not self._conn.connected:
            self._conn = self.cluster.open_connection(self.node_id)
        wanted = [s for s in self.states if s.active and not s.stream._queue.full()]
        if not wanted:
            self.stop_event.wait(0.05)
            return
        body = fetch_body(
            [(s.topic, s.partition, s.fetch_offset, self.fetch_size) for s in wanted],
            self.max_wait_ms,
            self.min_bytes,
            max(self.fetch_size, 50 * 1024 * 1024),
        )
        response = self._conn.request(
            FETCH, body, timeout=self.max_wait_ms / 1000 + self._conn.request_timeout
        )
        by_tp = {(s.topic, s.partition): s for s in wanted}
        leader_moved = False
        for topic in response.responses:
            for part in topic.partitions:
                state = by_tp.get((topic.topic, part.partition_index))
                if state is None or not state.active:
                    continue
                code = error_code(part.error_code)
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    self.reset_offset(state)
                    continue
                if code != ErrorCode.NONE:
                    if code in REFRESH_ERRORS:
                        leader_moved = True
                    continue
                records = part.records
                if not records:
                    continue
                decoded = decode_records(records, state.fetch_offset)
                if decoded.next_offset <= state.fetch_offset:
                    continue  # a partial batch only
                state.fetch_offset = decoded.next_offset
                chunk = Chunk(state, decoded, part.high_watermark)
                if len(decoded) and not state.stream.put(chunk, self.stop_event):
                    return
        if leader_moved:
            self.on_leader_change()
            self.stop_event.wait(self.backoff)
