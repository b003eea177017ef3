"""pykfk's producer: the seeds' Producer (sync and async, CallbackHandler, Encoder) in
Python style, speaking the Kafka protocol (Produce, Metadata, InitProducerId).

Records are grouped per partition into magic-2 batches built by the compiled core
(``build_batch``), so the per-record Python work is an append to a list. In async mode a
background sender thread sends a partition's batch when it reaches ``batch_size`` bytes,
when it is ``linger_ms`` old, or on ``flush()``; sync mode sends at once and returns the
offset. Idempotence (KIP-98: a producer id and a sequence per partition, so retries never
duplicate or reorder) is on by default with ``acks="all"``.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from concurrent.futures import _base as _futures_base
from typing import TYPE_CHECKING, Any, NamedTuple

from pykfk._core.records import BATCH_HEADER_SIZE, build_batch
from pykfk.client.cluster_view import REFRESH_ERRORS, ClusterMetadata
from pykfk.client.connection import BrokerConnection, InFlight
from pykfk.client.partitioner import DefaultPartitioner, Partitioner
from pykfk.errors import ErrorCode, KafkaError, error_code

__all__ = ["Producer", "QueueFullError", "RecordMetadata"]


if TYPE_CHECKING:
    from typing_extensions import Self

    from pykfk.audit import AuditEmitter

log = logging.getLogger("pykfk.producer")

PRODUCE = 0
INIT_PRODUCER_ID = 22

CODECS = {None: 0, "none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

# Bytes a record adds to a batch besides key, value and headers: length, attributes,
# timestamp and offset deltas, key and value lengths (varints, at most ~21 bytes; Kafka's
# DefaultRecord.MAX_RECORD_OVERHEAD). An estimate is enough to decide when a batch is full.
RECORD_OVERHEAD = 21
# Magic-2 batch header (apache/kafka DefaultRecordBatch.RECORD_BATCH_OVERHEAD).
BATCH_OVERHEAD = BATCH_HEADER_SIZE


class RecordMetadata(NamedTuple):
    """Where a record was stored. ``offset`` is -1 with acks=0 (no answer to learn it)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class QueueFullError(KafkaError):
    """The async queue stayed full for ``max_block_ms`` (the seeds' QueueFullException)."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.UNKNOWN_SERVER_ERROR, message)


Callback = Callable[["RecordMetadata | None", "Exception | None"], None]
# One record as appended: (key, value, timestamp ms, headers).
_Record = tuple[Any, Any, int, Any]


class _BatchResult:
    """The outcome every record of one batch shares: all its futures complete together,
    under one condition, so a record costs no lock or Future of its own."""

    __slots__ = (
        "base_offset",
        "condition",
        "error",
        "log_append_time",
        "partition",
        "records",
        "state",
        "topic",
        "watched",
    )

    def __init__(self, topic: str, partition: int, records: list[_Record]):
        self.condition = threading.Condition()  # an RLock: wait() acquires it once per future
        self.state = _futures_base.PENDING
        self.topic = topic
        self.partition = partition
        self.records = records
        self.base_offset = -1
        self.log_append_time = -1
        self.error: BaseException | None = None
        self.watched: list[RecordFuture] | None = None

    def complete(self, base_offset: int, log_append_time: int, error: BaseException | None) -> None:
        with self.condition:
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
            self.state = _futures_base.FINISHED
            watched = list(self.watched or ())
            for future in watched:
                for waiter in future.__dict__.get("_w", ()):
                    if error is None:
                        waiter.add_result(future)
                    else:
                        waiter.add_exception(future)
            self.condition.notify_all()
        for future in watched:
            # concurrent.futures' own completion step (private, absent from its stubs)
            future._invoke_callbacks()  # type: ignore[attr-defined]


class RecordFuture(Future[RecordMetadata]):
    """A ``concurrent.futures.Future`` of one record's RecordMetadata, backed by its batch's
    shared outcome. Works with ``result()``, ``exception()``, ``add_done_callback()``,
    ``concurrent.futures.wait`` and ``as_completed``. It cannot be cancelled (the record may
    already be on the wire) and only the producer completes it."""

    def __init__(self, batch_result: _BatchResult, index: int):  # no Future.__init__: cheap
        self._batch = batch_result
        self._index = index

    @property
    def _condition(self) -> threading.Condition:  # type: ignore[override]
        return self._batch.condition

    @property
    def _state(self) -> str:  # type: ignore[override]
        return self._batch.state

    @property
    def _exception(self) -> BaseException | None:  # type: ignore[override]
        return self._batch.error

    @property
    def _result(self) -> RecordMetadata | None:  # type: ignore[override]
        b = self._batch
        if b.state != _futures_base.FINISHED or b.error is not None:
            return None
        ts = b.log_append_time if b.log_append_time >= 0 else b.records[self._index][2]
        offset = b.base_offset + self._index if b.base_offset >= 0 else -1
        return RecordMetadata(b.topic, b.partition, offset, ts)

    def _watch(self, name: str) -> list[Any]:
        lists = self.__dict__
        if name not in lists:
            first = "_w" not in lists and "_c" not in lists
            lists[name] = []
            if first:
                b = self._batch
                if b.watched is None:
                    b.watched = []
                b.watched.append(self)
        watchers: list[Any] = lists[name]
        return watchers

    @property
    def _waiters(self) -> list[Any]:  # type: ignore[override]
        return self._watch("_w")

    @property
    def _done_callbacks(self) -> list[Any]:
        return self._watch("_c")

    def cancel(self) -> bool:
        return False

    def set_running_or_notify_cancel(self) -> bool:
        raise RuntimeError("record futures are completed by the producer")

    def set_result(self, result: Any) -> None:
        raise RuntimeError("record futures are completed by the producer")

    def set_exception(self, exception: BaseException | None) -> None:
        raise RuntimeError("record futures are completed by the producer")


class _Batch:
    """Records for one partition, sent together. Mutated under the producer's lock
    until drained, then owned by the sender thread."""

    __slots__ = (
        "attempts",
        "base_sequence",
        "callbacks",
        "created",
        "done",
        "partition",
        "payload",
        "records",
        "result",
        "retry_at",
        "retrying",
        "sealed",
        "size",
        "sticky",
        "topic",
    )

    def __init__(self, topic: str, partition: int, now: float):
        self.topic = topic
        self.partition = partition
        self.records: list[_Record] = []
        self.result = _BatchResult(topic, partition, self.records)
        self.callbacks: list[tuple[int, Callback]] | None = None
        self.size = BATCH_OVERHEAD
        self.created = now
        self.sealed = False
        self.attempts = 0
        self.payload: bytes | None = None
        self.base_sequence = -1
        self.retry_at = 0.0
        self.done = False
        self.sticky = False
        self.retrying = False


class Producer:
    """Sends records to topics.

    Brokers come from ``bootstrap_servers`` (``"host:port,..."``) or ``zk_connect`` (the
    seeds' ``zk.connect``: brokers found and watched under ``/brokers/ids``).

    ``producer_type``: ``"async"`` (default) queues records and returns a
    ``concurrent.futures.Future`` of ``RecordMetadata`` per record; ``"sync"`` waits and
    returns the offset. ``callback(metadata, exception)`` (the seeds' CallbackHandler) runs
    on the sender thread after each record's delivery or failure; keep it short.

    ``acks``: 0 (no answer), 1 (leader appended), ``"all"``/-1 (in-sync replicas have it).
    ``enable_idempotence`` (default: on when acks is all) asks the broker for a producer
    id and numbers every batch, so a retried batch is stored once and in order.
    ``compression_type``: None, ``"gzip"``, ``"snappy"``, ``"lz4"`` or ``"zstd"``.
    ``key_serializer`` / ``value_serializer``: callables ``obj -> bytes`` (the seeds'
    Encoder); default: bytes as they are. ``partitioner``: ``(key bytes|None, partition
    ids) -> partition id``; default murmur2 for keys (same partitions as the Java client and
    librdkafka's murmur2_random) and sticky partitions for null keys.

    ``audit``: a ``pykfk.audit.AuditEmitter``; every delivered record is counted in it
    per topic and time window of its timestamp (the paper's audit trail), and ``close()``
    publishes the counts gathered so far (the emitter's owner closes it).

    Thread-safe: any thread may call ``send``. Use as a context manager, or call
    ``close()``, which delivers what is queued first.
    """

    def __init__(
        self,
        bootstrap_servers: str | list[str] | None = None,
        *,
        zk_connect: str | None = None,
        client_id: str = "pykfk-producer",
        producer_type: str = "async",
        acks: int | str = "all",
        enable_idempotence: bool | None = None,
        compression_type: str | None = None,
        linger_ms: float = 5,
        batch_size: int = 1_000_000,  # librdkafka batch.size; under the broker message.max.bytes
        queue_max_messages: int = 1_000_000,
        max_block_ms: float = 60000,
        retries: int = 10,
        retry_backoff_ms: float = 100,
        request_timeout_ms: int = 30000,
        delivery_timeout_ms: int = 120000,
        max_in_flight_requests_per_connection: int = 5,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
        partitioner: Partitioner | None = None,
        callback: Callback | None = None,
        metadata_max_age_ms: int = 300000,
        audit: AuditEmitter | None = None,
    ):
        if producer_type not in ("sync", "async"):
            raise ValueError("producer_type must be 'sync' or 'async'")
        if acks in ("all", -1, "-1"):
            acks_value = -1
        elif acks in (0, 1, "0", "1"):
            acks_value = int(acks)
        else:
            raise ValueError(f"acks must be 0, 1 or 'all', not {acks!r}")
        if compression_type not in CODECS:
            raise ValueError("compression_type must be one of gzip, snappy, lz4, zstd or None")
        if enable_idempotence is None:
            enable_idempotence = acks_value == -1
        elif enable_idempotence and acks_value != -1:
            raise ValueError("enable_idempotence requires acks='all'")
        if enable_idempotence and retries < 1:
            raise ValueError("enable_idempotence requires retries >= 1")
        if enable_idempotence:
            # The broker remembers the last 5 batches per producer and partition
            # (Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN).
            max_in_flight_requests_per_connection = min(max_in_flight_requests_per_connection, 5)
        self.sync = producer_type == "sync"
        self.acks = acks_value
        self.idempotent = enable_idempotence
        self.compression = CODECS[compression_type]
        self.linger = linger_ms / 1000
        self.batch_size = batch_size
        self.queue_max_messages = queue_max_messages
        self.max_block = max_block_ms / 1000
        self.retries = retries
        self.retry_backoff = retry_backoff_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.delivery_timeout = delivery_timeout_ms / 1000
        self.max_in_flight = max(1, max_in_flight_requests_per_connection)
        self.key_serializer = key_serializer
        self.value_serializer = value_serializer
        self.callback = callback
        self.audit = audit
        self._custom_partitioner = partitioner
        self._partitioner = DefaultPartitioner()
        self.cluster = ClusterMetadata(
            bootstrap_servers,
            zk_connect=zk_connect,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._cond = threading.Condition(threading.Lock())
        self._queues: dict[tuple[str, int], collections.deque[_Batch]] = {}
        self._queued = 0  # records appended and not yet completed
        self._flushing = 0
        self._closing = False
        self._close_deadline = float("inf")
        self._closed = False
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._retrying: dict[tuple[str, int], int] = {}
        self._refresh_topics: set[str] = set()
        self._conns: dict[int, BrokerConnection] = {}
        self._in_flight: dict[int, collections.deque[tuple[InFlight, list[_Batch]]]] = {}
        self._sender_error: BaseException | None = None
        self._sender = threading.Thread(
            target=self._run_sender, name="pykfk-producer-sender", daemon=True
        )
        self._sender.start()

    # ------------------------------------------------------------------ public

    def send(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        partition: int | None = None,
        headers: Sequence[tuple[str | bytes, bytes | None]] | None = None,
        timestamp: int | None = None,
        callback: Callback | None = None,
    ) -> Any:
        """Queue one record. Async: returns a Future of RecordMetadata. Sync: waits and
        returns the record's offset (raises KafkaError if it could not be stored)."""
        if self.value_serializer is not None:
            value = self.value_serializer(value)
        if self.key_serializer is not None and key is not None:
            key = self.key_serializer(key)
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        future = self._append(
            topic, partition, key, (key, value, timestamp, headers), callback, self.sync
        )
        if self.sync:
            return future.result(self.delivery_timeout + 5).offset
        return future

    def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        key: Any = None,
        partition: int | None = None,
        headers: Sequence[tuple[str | bytes, bytes | None]] | None = None,
        timestamp: int | None = None,
    ) -> list[Any]:
        """Queue a list of values with one key (the seeds' ProducerData(topic, key, data)).
        Returns their futures (async) or offsets (sync)."""
        if self.key_serializer is not None and key is not None:
            key = self.key_serializer(key)
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        serialize = self.value_serializer
        values = list(values)
        last = len(values) - 1
        futures = [
            self._append(
                topic,
                partition,
                key,
                (key, serialize(v) if serialize else v, timestamp, headers),
                None,
                self.sync and i == last,  # sync: the list goes out as one batch
            )
            for i, v in enumerate(values)
        ]
        if self.sync:
            return [f.result(self.delivery_timeout + 5).offset for f in futures]
        return futures

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far and wait until each record is delivered or has
        failed. TimeoutError when that takes longer than ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            pending = [b for q in self._queues.values() for b in q]
            pending += [b for q in self._in_flight.values() for _, batches in q for b in batches]
            self._flushing += 1
            self._cond.notify_all()
            try:
                for batch in pending:
                    while not batch.done:
                        if self._sender_error is not None or not self._sender.is_alive():
                            raise RuntimeError(
                                "producer sender thread died"
                            ) from self._sender_error
                        remaining = None if deadline is None else deadline - time.monotonic()
                        if remaining is not None and remaining <= 0:
                            raise TimeoutError("flush timed out")
                        self._cond.wait(0.5 if remaining is None else min(remaining, 0.5))
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), stop the sender, close
        connections. Records still queued after the timeout fail."""
        if self._closed:
            return
        try:
            if self._sender.is_alive():
                self.flush(timeout)
        finally:
            with self._cond:
                self._closing = True
                self._close_deadline = time.monotonic() + (5 if timeout is None else 0)
                self._cond.notify_all()
            self._sender.join(30)
            self._closed = True
            self.cluster.close()
            if self.audit is not None:
                self.audit.emit()

    def partitions_for(self, topic: str) -> list[int]:
        return list(self.cluster.topic(topic, auto_create=True).partitions)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- queueing

    def _topic_info(self, topic: str, key: bytes | None, partition: int | None) -> Any:
        info = self.cluster.topic(topic, auto_create=True)
        if partition is not None and partition not in info.leaders:
            self.cluster.refresh([topic], allow_auto_create=True)
            info = self.cluster.topic(topic, auto_create=True)
            if partition not in info.leaders:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}[{partition}]")
        return info

    def _append(
        self,
        topic: str,
        partition: int | None,
        key: Any,
        record: _Record,
        callback: Callback | None,
        seal: bool,
    ) -> Future[RecordMetadata]:
        if self._closing or self._closed:
            raise RuntimeError("producer is closed")
        info = self.cluster.topics.get(topic)  # refreshed by the sender every metadata_max_age
        if info is None or partition is not None:
            info = self._topic_info(topic, key, partition)
        sticky = False
        if partition is None and self._custom_partitioner is not None:
            partition = self._custom_partitioner(key, info.partitions)
        elif partition is None and key is not None:
            partition = self._partitioner.partition(topic, key, info.partitions, ())
        elif partition is None:
            sticky = True
        value = record[1]
        size = (
            RECORD_OVERHEAD
            + (len(value) if value is not None else 0)
            + (len(key) if key is not None else 0)
        )
        with self._cond:
            if self._queued >= self.queue_max_messages:
                self._wait_for_room()
            if sticky:
                partition = self._partitioner.partition(
                    topic, None, info.partitions, info.available
                )
            batch = self._open_batch(topic, partition, size)  # type: ignore[arg-type]
            if sticky and batch.records and batch.size + size > self.batch_size:
                # The sticky partition's batch is full: seal it, which moves null-key
                # records to another partition (KIP-480), and follow them there.
                self._seal(batch)
                partition = self._partitioner.partition(
                    topic, None, info.partitions, info.available
                )
                batch = self._open_batch(topic, partition, size)
            elif batch.records and batch.size + size > self.batch_size:
                self._seal(batch)
                batch = self._open_batch(topic, partition, size)  # type: ignore[arg-type]
            if callback is not None:
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((len(batch.records), callback))
            future = RecordFuture(batch.result, len(batch.records))
            batch.records.append(record)
            batch.size += size
            if sticky:
                batch.sticky = True
            self._queued += 1
            if seal or batch.size >= self.batch_size:
                self._seal(batch)
        return future

    def _open_batch(self, topic: str, partition: int, size: int) -> _Batch:
        """Under the lock: the unsealed batch at the tail of the partition's queue."""
        tp = (topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = collections.deque()
        if queue and not queue[-1].sealed:
            return queue[-1]
        batch = _Batch(topic, partition, time.monotonic())
        queue.append(batch)
        self._cond.notify_all()  # the sender starts this batch's linger clock
        return batch

    def _seal(self, batch: _Batch) -> None:
        """Under the lock: no more records go into ``batch``; wake the sender."""
        if not batch.sealed:
            batch.sealed = True
            if batch.sticky and self._custom_partitioner is None:
                info = self.cluster.topics.get(batch.topic)
                if info is not None:
                    self._partitioner.next_sticky(
                        batch.topic, info.available or info.partitions, batch.partition
                    )
            self._cond.notify_all()

    def _wait_for_room(self) -> None:
        deadline = time.monotonic() + self.max_block
        while self._queued >= self.queue_max_messages:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise QueueFullError(f"{self._queued} records queued for {self.max_block}s")
            self._flushing += 1  # send what we have now rather than after linger_ms
            self._cond.notify_all()
            try:
                self._cond.wait(min(remaining, 0.5))
            finally:
                self._flushing -= 1

    # ------------------------------------------------------------------ sender

    def _run_sender(self) -> None:
        try:
            while True:
                ready = self._next_ready()
                if ready is None:
                    break
                if ready:
                    self._send_batches(ready)
                elif self._any_in_flight():
                    self._receive_one()
        except BaseException as exc:  # keep the process alive; fail what is queued
            log.exception("producer sender stopped")
            self._sender_error = exc
            self._fail_everything(
                KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"sender stopped: {exc!r}")
            )
        finally:
            for conn in self._conns.values():
                conn.close()

    def _any_in_flight(self) -> bool:
        return any(self._in_flight.values())

    def _is_ready(self, batch: _Batch, now: float) -> bool:
        if batch.retry_at > now:
            return False
        return (
            batch.sealed
            or self._flushing > 0
            or self._closing
            or now - batch.created >= self.linger
        )

    def _next_ready(self) -> list[_Batch] | None:
        """Wait until some batch may go (or in-flight responses need reading); returns the
        batches to send now, [] to go read responses, None when closed."""
        if time.monotonic() - self.cluster.last_refresh > self.cluster.metadata_max_age:
            self._refresh_topics.update(self.cluster.topics)
        if self._refresh_topics:
            topics, self._refresh_topics = self._refresh_topics, set()
            try:
                self.cluster.refresh(topics)
            except KafkaError as exc:
                log.debug("metadata refresh failed: %s", exc)
        if self.idempotent and self._producer_id < 0:
            with self._cond:
                has_work = any(self._queues.values())
            if has_work:
                self._init_producer_id()
        with self._cond:
            while True:
                if self.idempotent and self._producer_id < 0 and any(self._queues.values()):
                    return []  # get a producer id first
                now = time.monotonic()
                ready = []
                wait = None
                for tp, queue in self._queues.items():
                    if not queue:
                        continue
                    head = queue[0]
                    if self._is_ready(head, now):
                        leader = self.cluster.topics.get(tp[0])
                        node = leader.leaders.get(tp[1], -1) if leader else -1
                        if node < 0:
                            self._refresh_topics.add(tp[0])
                            head.retry_at = now + self.retry_backoff
                            continue
                        if len(self._in_flight.get(node, ())) >= self.max_in_flight:
                            continue
                        queue.popleft()
                        self._seal(head)
                        ready.append(head)
                    else:
                        due = max(head.retry_at, head.created + self.linger) - now
                        wait = due if wait is None else min(wait, due)
                if ready:
                    return ready
                if self._any_in_flight():
                    return []
                if self._refresh_topics:
                    return []
                if self._closing and not any(self._queues.values()):
                    return None
                if self._closing and now > self._close_deadline:
                    self._cond.release()
                    try:
                        self._fail_everything(
                            KafkaError(ErrorCode.REQUEST_TIMED_OUT, "producer closed")
                        )
                    finally:
                        self._cond.acquire()
                    return None
                if self._closing:
                    wait = 0.05 if wait is None else min(wait, 0.05)
                self._cond.wait(wait if wait is None or wait > 0 else 0.001)

    def _init_producer_id(self) -> None:
        deadline = time.monotonic() + self.delivery_timeout
        delay = self.retry_backoff
        while True:
            try:
                response = self.cluster.request(
                    INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": 60000}
                )
                code = error_code(response.error_code)
                if code == ErrorCode.NONE:
                    self._producer_id = response.producer_id
                    self._producer_epoch = response.producer_epoch
                    return
                error: KafkaError = KafkaError(code, "InitProducerId")
            except KafkaError as exc:
                error = exc
            if not error.retriable or time.monotonic() + delay > deadline:
                self._fail_everything(error)
                return
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _connection(self, node: int) -> BrokerConnection:
        conn = self._conns.get(node)
        if conn is None or not conn.connected:
            conn = self.cluster.open_connection(node)
            self._conns[node] = conn
        return conn

    def _send_batches(self, batches: list[_Batch]) -> None:
        by_node: dict[int, list[_Batch]] = {}
        for batch in batches:
            info = self.cluster.topics.get(batch.topic)
            node = info.leaders.get(batch.partition, -1) if info else -1
            by_node.setdefault(node, []).append(batch)
        for node, node_batches in by_node.items():
            topic_data: dict[str, list[dict[str, Any]]] = {}
            for batch in node_batches:
                if batch.payload is None:
                    self._build(batch)
                batch.attempts += 1
                topic_data.setdefault(batch.topic, []).append(
                    {"index": batch.partition, "records": batch.payload}
                )
            body = {
                "transactional_id": None,
                "acks": self.acks,
                "timeout_ms": self.request_timeout_ms,
                "topic_data": [
                    {"name": t, "partition_data": parts} for t, parts in topic_data.items()
                ],
            }
            try:
                if node < 0:
                    raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "no leader")
                conn = self._connection(node)
                entry = conn.send(PRODUCE, body, expect_response=self.acks != 0)
            except KafkaError as exc:
                # Cannot reach the leader: retriable, after a metadata refresh.
                code = exc.code if exc.retriable else ErrorCode.NETWORK_EXCEPTION
                for batch in node_batches:
                    self._failed(batch, code, str(exc))
                continue
            if self.acks == 0:
                for batch in node_batches:
                    self._complete(batch, -1, -1)
            else:
                self._in_flight.setdefault(node, collections.deque()).append((entry, node_batches))

    def _build(self, batch: _Batch) -> None:
        tp = (batch.topic, batch.partition)
        if self.idempotent and batch.base_sequence < 0:
            batch.base_sequence = self._next_sequence.get(tp, 0)
            self._next_sequence[tp] = (batch.base_sequence + len(batch.records)) & 0x7FFFFFFF
        batch.payload = build_batch(
            batch.records,
            compression=self.compression,
            producer_id=self._producer_id if self.idempotent else -1,
            producer_epoch=self._producer_epoch if self.idempotent else -1,
            base_sequence=batch.base_sequence,
        )

    def _receive_one(self) -> None:
        node = next(n for n, q in self._in_flight.items() if q)
        queue = self._in_flight[node]
        entry, batches = queue[0]
        conn = self._conns.get(node)
        try:
            if conn is None:
                raise KafkaError(ErrorCode.NETWORK_EXCEPTION, "connection closed")
            response = conn.receive(entry, self.request_timeout_ms / 1000 + 5)
        except KafkaError as exc:
            # The connection is gone and every request on it with it.
            lost = list(queue)
            queue.clear()
            for _, lost_batches in lost:
                for batch in lost_batches:
                    self._failed(batch, exc.code, str(exc))
            return
        queue.popleft()
        results = {}
        for topic in response.responses:
            for part in topic.partition_responses:
                results[(topic.name, part.index)] = part
        for batch in batches:
            part = results.get((batch.topic, batch.partition))
            if part is None:
                self._failed(batch, ErrorCode.UNKNOWN_SERVER_ERROR, "partition missing in response")
                continue
            code = error_code(part.error_code)
            if code == ErrorCode.NONE or code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                self._complete(batch, part.base_offset, getattr(part, "log_append_time_ms", -1))
            else:
                self._failed(batch, code, getattr(part, "error_message", None) or "")

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int) -> None:
        self._end_retry(batch)
        if self.audit is not None and batch.topic != self.audit.topic:
            self.audit.count_timestamps(batch.topic, [record[2] for record in batch.records])
        batch.result.complete(base_offset, log_append_time, None)
        self._run_callbacks(batch, None)
        self._finish(batch)

    def _failed(self, batch: _Batch, code: ErrorCode, message: str) -> None:
        tp = (batch.topic, batch.partition)
        expired = time.monotonic() - batch.created > self.delivery_timeout
        retriable = code.retriable or (
            code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._retrying.get(tp, 0) > 0
        )
        if retriable and batch.attempts <= self.retries and not expired:
            if code in REFRESH_ERRORS:
                self._refresh_topics.add(batch.topic)
            log.debug("retrying %s[%d] after %s", batch.topic, batch.partition, code.name)
            with self._cond:
                if not batch.retrying:
                    batch.retrying = True
                    self._retrying[tp] = self._retrying.get(tp, 0) + 1
                batch.retry_at = time.monotonic() + self.retry_backoff
                queue = self._queues.setdefault(tp, collections.deque())
                # Batches already numbered go back first, in sequence order.
                resent = [batch]
                while queue and queue[0].attempts > 0:
                    resent.append(queue.popleft())
                resent.sort(key=lambda b: b.base_sequence)
                queue.extendleft(reversed(resent))
            return
        self._end_retry(batch)
        error = KafkaError(code, message or None)
        batch.result.complete(-1, -1, error)
        self._run_callbacks(batch, error)
        self._finish(batch)

    def _end_retry(self, batch: _Batch) -> None:
        if batch.retrying:
            batch.retrying = False
            self._retrying[(batch.topic, batch.partition)] -= 1

    def _run_callbacks(self, batch: _Batch, error: Exception | None) -> None:
        default = self.callback
        if batch.callbacks is None and default is None:
            return
        per_record = dict(batch.callbacks or ())
        for i in range(len(batch.records)):
            callback = per_record.get(i, default)
            if callback is None:
                continue
            metadata = None if error else RecordFuture(batch.result, i)._result
            try:
                callback(metadata, error)
            except Exception:  # a user callback must not stop delivery of the rest
                log.exception("delivery callback failed")

    def _finish(self, batch: _Batch) -> None:
        with self._cond:
            batch.done = True
            self._queued -= len(batch.records)
            batch.payload = None
            self._cond.notify_all()

    def _fail_everything(self, error: KafkaError) -> None:
        with self._cond:
            batches = [b for q in self._queues.values() for b in q]
            for q in self._queues.values():
                q.clear()
            for sent in self._in_flight.values():
                batches += [b for _, bs in sent for b in bs]
                sent.clear()
        for batch in batches:
            if not batch.done:
                batch.result.complete(-1, -1, error)
                self._run_callbacks(batch, error)
                self._finish(batch)
