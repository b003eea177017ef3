"""One mirror process: consume the source (a consumer group shared by every process of
the same mirror), produce into the target, and keep progress, topics and checkpoints.

Delivery (docs/mirror.md, "Delivery guarantee"):

- ``exactly.once=true`` (the default): each source partition's records go into the
  target inside transactions of that partition's own producer (transactions.py), and
  the progress entry that says how far the copy got is written in the same transaction,
  so records and progress become visible together or not at all. A process that takes a
  partition over fences the previous holder first and resumes at the committed progress:
  a read_committed consumer of the target sees every source record once.
- ``exactly.once=false``: at least once. The progress of a partition is written only
  after the target acknowledged (acks=all, idempotent producer) every record before it,
  every ``progress.interval.ms`` and whenever ``progress.max.records`` records were
  copied since the last write, so a crash leaves at most ``progress.max.records +
  consume.batch.records - 1`` records of this process's partitions in the target twice.

Either way a rebalance leaves no duplicates: progress is written before partitions are
given up.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from pykfk.mirror.checkpoints import Checkpointer
from pykfk.mirror.config import ClientConfig, MirrorConfig
from pykfk.mirror.errors import MirrorError
from pykfk.mirror.naming import ORIGIN_HEADER, Headers, ReplicationPolicy
from pykfk.mirror.progress import READ_TIMEOUT_S, OffsetSyncs, ProgressEntry, ProgressStore
from pykfk.mirror.topics import TopicSync
from pykfk.mirror.transactions import PartitionTransactions

if TYPE_CHECKING:  # prometheus_client is only needed with metrics.listener
    from pykfk.mirror.metrics import MirrorMetricsServer

__all__ = ["AuditSink", "Mirror", "MirrorError", "MirrorStats"]

log = logging.getLogger("pykfk.mirror")

# Longest the mirror waits for the target to acknowledge what it sent (seconds); past
# it the process stops rather than write progress it cannot vouch for.
FLUSH_TIMEOUT_S = 60
# How long one consume call may wait for records (seconds): the loop's tick.
CONSUME_WAIT_S = 0.1
# librdkafka's default transaction.timeout.ms: a transaction a dead process left open in
# the progress topic ends by then at the latest (aborted by the coordinator).
TRANSACTION_TIMEOUT_S = 60

# Room left in a batch for its header (61 bytes in Kafka's record batch v2) and slack.
BATCH_HEADER_MARGIN = 1024

SourcePartition = tuple[str, int]
T = TypeVar("T")


class AuditSink(Protocol):
    """Where the mirror's audit counts go (pykfk.audit.AuditEmitter)."""

    def add_counts(self, counts: dict[tuple[str, int], int]) -> None: ...


@dataclass
class _Route:
    """Where records of one source topic go."""

    remote: str
    same_partition: bool
    partitions: int


@dataclass
class MirrorStats:
    records: int = 0
    bytes: int = 0
    skipped_cycles: int = 0
    progress_writes: int = 0
    checkpoints: int = 0
    # source topic -> [records, bytes] copied; replaced, never resized in place, so the
    # metrics thread can iterate a reference it took
    by_topic: dict[str, list[int]] = field(default_factory=dict)


class Mirror:
    """Copies the configured topics from ``config.source`` to ``config.target``.

    ``run()`` loops until ``stop()`` (any thread, or SIGTERM/SIGINT under ``main``).
    ``report`` gets the progress line every ``report.interval.ms``.
    """

    def __init__(self, config: MirrorConfig, report: Callable[[str], None] | None = None,
                 audit: AuditSink | None = None):
        self.config = config
        self.report = report or (lambda line: print(line, file=sys.stderr, flush=True))
        self.policy = ReplicationPolicy(config.replication_policy, config.source.alias,
                                        config.target.alias, config.separator)
        self.topic_sync = TopicSync(config, self.policy)
        self.checkpointer = Checkpointer(config, self.topic_sync.source_admin)
        self.audit = audit
        self.stats = MirrorStats()
        self.rates = (0.0, 0.0)  # records/s and bytes/s over the last report interval
        self._stop = threading.Event()
        self._failed = False
        self._owned: set[SourcePartition] = set()
        self._positions: dict[SourcePartition, int] = {}  # next source offset, records sent
        self._written: dict[SourcePartition, int] = {}  # progress offset last written
        self._syncs: dict[SourcePartition, OffsetSyncs] = defaultdict(OffsetSyncs)
        self._routes: dict[str, _Route] = {}
        self._subscribed: list[str] = []
        self._since_progress = 0
        self._audit_counts: dict[tuple[str, int], int] = defaultdict(int)
        self._delivery_errors: list[str] = []
        self._consumer = Consumer(self._consumer_config())
        # Idempotent, not transactional: every write at least once, and the checkpoints
        # in either mode (a checkpoint written twice is the same checkpoint).
        self._producer = Producer(self._producer_config())
        self.transactions = (PartitionTransactions(self._transactional_config(), config.transactional_id_prefix)
                             if config.exactly_once else None)
        self.progress = ProgressStore(config.target.client("consumer"), config.progress_topic)
        self._metrics: MirrorMetricsServer | None = None

    # ------------------------------------------------------------------ clients

    def _consumer_config(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "auto.offset.reset": "earliest" if self.config.start_from == "earliest" else "latest",
            "enable.partition.eof": False,
            "fetch.max.bytes": 16 << 20,
            **self.config.source.client("consumer"),
            "group.id": self.config.group_id,
            "enable.auto.commit": False,  # progress lives in the target, not in the group
            "enable.auto.offset.store": False,
            # Records of aborted source transactions are not records to copy.
            "isolation.level": "read_committed",
        }
        if self.config.group_instance_id:
            settings["group.instance.id"] = self.config.group_instance_id
        return settings

    def _client_producer_config(self) -> ClientConfig:
        return {
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 512 * 1024,
            # Keyed records land where the Java client would put them (partition counts differ).
            "partitioner": "murmur2_random",
            **self.config.target.client("producer"),
            "enable.idempotence": True,
            "acks": "all",
            # Success is learned from flush() (or the commit); only failures need a call per record.
            "delivery.report.only.error": True,
        }

    def _producer_config(self) -> dict[str, Any]:
        return {**self._client_producer_config(), "on_delivery": self._on_delivery}

    def _transactional_config(self) -> dict[str, Any]:
        # A failed record fails its transaction's commit; no callback needed.
        return dict(self._client_producer_config())

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self._delivery_errors.append(f"{message.topic()}[{message.partition()}]: {error}")

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        self._stop.set()

    def run(self, max_seconds: float | None = None) -> MirrorStats:
        """Mirror until stopped (or ``max_seconds``); progress is written on the way out."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self._start()
        try:
            self._loop(deadline)
            self.write_progress()
        except BaseException:
            self._failed = True  # nothing more is written: the next start resumes
            raise
        finally:
            self.close()
        return self.stats

    def _loop(self, deadline: float | None) -> None:
        now = time.monotonic()
        due_progress = now + self.config.progress_interval_ms / 1000
        due_refresh = now + self.config.refresh_topics_interval_ms / 1000
        due_checkpoints = now + self.config.checkpoints_interval_ms / 1000
        due_report = now + self.config.report_interval_ms / 1000
        last_report = (now, 0, 0)
        while not self._stop.is_set() and (deadline is None or time.monotonic() < deadline):
            self._copy(self._consumer.consume(self.config.consume_batch_records, CONSUME_WAIT_S))
            now = time.monotonic()
            if self._since_progress >= self.config.progress_max_records or now >= due_progress:
                self.write_progress()
                due_progress = now + self.config.progress_interval_ms / 1000
            if now >= due_refresh:
                self._refresh_topics()
                due_refresh = now + self.config.refresh_topics_interval_ms / 1000
            if self.config.emit_checkpoints and now >= due_checkpoints:
                self._emit_checkpoints()
                due_checkpoints = now + self.config.checkpoints_interval_ms / 1000
            if now >= due_report:
                self.report(self._progress_line(last_report, now))
                last_report = (now, self.stats.records, self.stats.bytes)
                due_report = now + self.config.report_interval_ms / 1000

    def _start(self) -> None:
        if self.config.metrics_listener is not None:
            self._metrics = self._metrics_server(*self.config.metrics_listener)
        self.topic_sync.refresh_target()
        self.topic_sync.ensure_internal(self.config.progress_topic)
        if self.config.emit_checkpoints:
            self.topic_sync.ensure_internal(self.config.checkpoints_topic)
        self._refresh_topics()
        log.info("copying %s", "exactly once (transactions)" if self.transactions else "at least once")

    def _metrics_server(self, host: str, port: int) -> MirrorMetricsServer:
        try:
            from pykfk.mirror.metrics import MirrorMetricsServer
        except ImportError:
            raise MirrorError("metrics.listener needs the prometheus_client package: "
                              "pip install 'pykfk[metrics]'") from None
        return MirrorMetricsServer(self, host, port).start()

    def close(self) -> None:
        """Leave the group (its revocation writes progress), flush, release clients."""
        try:
            self._consumer.close()
        finally:
            self._producer.flush(FLUSH_TIMEOUT_S)
            if self.transactions is not None:
                self.transactions.close()
            self.progress.close()
            if self._metrics is not None:
                self._metrics.stop()

    # ------------------------------------------------------------------ topics

    def _refresh_topics(self) -> None:
        source = self.topic_sync.source_partitions()
        self.topic_sync.sync(source)
        self._routes.clear()
        wanted = sorted(source)
        if wanted != self._subscribed:
            if wanted:
                self._consumer.subscribe(wanted, on_assign=self._on_assign, on_revoke=self._on_revoke)
            else:
                self._consumer.unsubscribe()
            log.info("copying %d topics: %s", len(wanted), ", ".join(wanted))
            self._subscribed = wanted

    def _route(self, topic: str, partition: int) -> _Route:
        route = self._routes.get(topic)
        if route is None or (route.same_partition and partition >= route.partitions):
            # A topic or partition the target may not have yet: sync that topic now.
            metadata = self.topic_sync.source_admin.list_topics(topic, timeout=30).topics[topic]
            source_count = len(metadata.partitions)
            self.topic_sync.refresh_target()
            self.topic_sync.sync_topic(topic, source_count)
            remote = self.policy.remote_topic(topic)
            target_count = self.topic_sync.target_partitions[remote]
            route = _Route(remote, target_count == source_count, target_count)
            self._routes[topic] = route
        return route

    # ------------------------------------------------------------------ rebalance

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.transactions is not None:
            # Fence the previous holders before reading the progress they may still write.
            for tp in partitions:
                self.transactions.open((tp.topic, tp.partition), self._batch_limit(tp.topic))
            self.progress.catch_up(READ_TIMEOUT_S + TRANSACTION_TIMEOUT_S)
        else:
            self.progress.catch_up()
        start = OFFSET_BEGINNING if self.config.start_from == "earliest" else OFFSET_END
        for tp in partitions:
            key = (tp.topic, tp.partition)
            entry = self.progress.entries.get(key)
            tp.offset = entry.offset if entry is not None else start
            if key in self.progress.history:
                self._syncs[key] = self.progress.history[key].copy()
            if entry is not None:
                self._written[key] = entry.offset
            elif start == OFFSET_BEGINNING:
                self._first_sync(consumer, tp.topic, tp.partition)
            self._owned.add(key)
        consumer.assign(partitions)
        log.info("assigned %d partitions", len(partitions))

    def _batch_limit(self, topic: str) -> ClientConfig:
        """A batch of one transactional producer holds records of one remote topic: keep
        it within that topic's max.message.bytes, or the target refuses it (and the
        transaction with it). The record batch header is 61 bytes; librdkafka counts the
        per-record framing in batch.size itself."""
        limit = self.topic_sync.max_message_bytes(self.policy.remote_topic(topic)) - BATCH_HEADER_MARGIN
        configured = int(self._client_producer_config()["batch.size"])
        return {"batch.size": max(1, min(configured, limit))}

    def _first_sync(self, consumer: Consumer, topic: str, partition: int) -> None:
        """A partition copied from its start: every record from the source's log start
        on lands after the target's current end."""
        route = self._route(topic, partition)
        if route.same_partition:
            self._syncs[(topic, partition)].add(
                self.progress.source_start(consumer, topic, partition),
                self.progress.target_end(route.remote, partition))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self._failed:
            self.write_progress()
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._owned.discard(key)
            self._positions.pop(key, None)
            self._written.pop(key, None)
            self._syncs.pop(key, None)
            if self.transactions is not None:
                self.transactions.release(key)
        consumer.unassign()

    # ------------------------------------------------------------------ copying

    def _copy(self, messages: list[Message]) -> None:
        owned, positions, marks = self._owned, self._positions, self.policy.marks_records
        audit = self._audit_counts if self.audit is not None else None
        window = self.config.audit_window_ms
        by_topic: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for message in messages:
            error = message.error()
            if error is not None:
                self._consume_error(error)
                continue
            topic, partition, offset = str(message.topic()), int(message.partition() or 0), int(message.offset() or 0)
            if (topic, partition) not in owned:
                continue  # fetched before a revocation: the new owner copies it
            headers = _header_list(message.headers())
            if marks:
                headers = self._mark(headers)
                if headers is None:
                    positions[(topic, partition)] = offset + 1
                    self.stats.skipped_cycles += 1
                    continue
            size = self._copy_one(message, topic, partition, headers)
            positions[(topic, partition)] = offset + 1
            counts = by_topic[topic]
            counts[0] += 1
            counts[1] += size
            if audit is not None:
                timestamp = message.timestamp()[1]
                audit[(topic, timestamp - timestamp % window)] += 1
        self._poll_producers()
        self._count(by_topic)

    def _copy_one(self, message: Message, topic: str, partition: int, headers: Headers | None) -> int:
        """Send one record to its remote topic; returns its key + value bytes."""
        route = self._route(topic, partition)
        producer = self._producer_of((topic, partition))
        key, value = message.key(), message.value()
        try:
            self._produce(producer, route.remote, value, key, partition if route.same_partition else -1,
                          max(0, message.timestamp()[1]), headers)
        except KafkaException as exc:  # a failed producer takes no more records
            raise self._refusal((topic, partition), exc) from exc
        return (len(key) if key else 0) + (len(value) if value else 0)

    def _poll_producers(self) -> None:
        self._plain(lambda producer: producer.poll(0))
        if self.transactions is not None:
            self.transactions.poll()

    def _count(self, by_topic: dict[str, list[int]]) -> None:
        totals = self.stats.by_topic
        if not by_topic.keys() <= totals.keys():
            totals = self.stats.by_topic = {**{t: [0, 0] for t in by_topic}, **totals}
        for topic, (records, size) in by_topic.items():
            totals[topic][0] += records
            totals[topic][1] += size
            self.stats.records += records
            self.stats.bytes += size
            self._since_progress += records

    def _producer_of(self, partition: SourcePartition) -> Producer:
        """The producer a source partition's records go through: the one idempotent
        producer at least once, the partition's own inside a transaction exactly once."""
        return self._producer if self.transactions is None else self.transactions.producer(partition)

    def _refusal(self, partition: SourcePartition, exc: KafkaException) -> MirrorError:
        """The error that stops the mirror when a producer raised ``exc`` (a fatal error
        of a producer is raised by whichever call meets it)."""
        if self.transactions is not None:
            return self.transactions.failure(partition, exc)
        return MirrorError(f"the target refused records: {exc}")

    def _plain(self, call: Callable[[Producer], T]) -> T:
        """``call(producer)`` on the idempotent producer; MirrorError if it raises."""
        try:
            return call(self._producer)
        except KafkaException as exc:
            raise MirrorError(f"the target refused records: {exc}") from exc

    @staticmethod
    def _produce(producer: Producer, topic: str, value: bytes | None, key: bytes | None, partition: int,
                 timestamp: int, headers: Headers | None) -> None:
        deadline = None
        while True:
            try:
                producer.produce(topic, value, key, partition, timestamp=timestamp, headers=headers)
                return
            except BufferError:
                # The local queue is full: let librdkafka send, for a bounded time.
                deadline = deadline or time.monotonic() + FLUSH_TIMEOUT_S
                if time.monotonic() > deadline:
                    raise MirrorError(f"the target took no records for {FLUSH_TIMEOUT_S} s") from None
                producer.poll(0.05)

    def _mark(self, headers: Headers | None) -> Headers | None:
        """Identity naming: None for a record that came from the target, else the
        headers with the origin mark (added when absent)."""
        origin = self.policy.origin_of(headers)
        if origin == self.config.target.alias:
            return None
        if origin is not None:
            return headers
        return [*(headers or ()), (ORIGIN_HEADER, self.config.source.alias.encode())]

    def _consume_error(self, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        if error.fatal():
            raise MirrorError(f"source consumer: {error}")
        log.warning("source consumer: %s", error)

    # ------------------------------------------------------------------ progress

    def _flush(self) -> None:
        remaining = self._plain(lambda producer: producer.flush(FLUSH_TIMEOUT_S))
        if remaining:
            raise MirrorError(f"{remaining} records not acknowledged by the target in {FLUSH_TIMEOUT_S} s")
        if self._delivery_errors:
            raise MirrorError("the target refused records: " + "; ".join(self._delivery_errors[:5]))

    def write_progress(self) -> None:
        """Record where each partition stands (with the offset syncs, and the audit
        counts) once the target holds every record sent so far: acknowledged, or (exactly
        once) committed in the same transaction as the progress."""
        changed = {tp: offset for tp, offset in self._positions.items()
                   if tp in self._owned and self._written.get(tp) != offset}
        self._since_progress = 0
        if not changed:
            return
        if self.transactions is None:
            self._flush()
            self._write_entries(changed)
            self._flush()
        else:
            self._commit_transactions(changed)
        self._emit_audit()
        self.stats.progress_writes += 1

    def _commit_transactions(self, changed: dict[SourcePartition, int]) -> None:
        transactions = self.transactions
        assert transactions is not None
        transactions.flush([tp for tp in changed if transactions.has_open(tp)])
        self._write_entries(changed)
        for partition in changed:
            transactions.commit(partition)

    def _write_entries(self, changed: dict[SourcePartition, int]) -> None:
        """Queue the progress entries (the target acknowledged the records before them),
        each on the producer its partition's records went through."""
        for (topic, partition), offset in changed.items():
            route = self._route(topic, partition)
            target_partition = partition if route.same_partition else -1
            target_offset = (self.progress.target_end(route.remote, partition)
                             if route.same_partition else -1)
            entry = ProgressEntry(offset, route.remote, target_partition, target_offset)
            try:
                self.progress.write(self._producer_of((topic, partition)), topic, partition, entry)
            except KafkaException as exc:  # a failed transaction takes no progress entry
                raise self._refusal((topic, partition), exc) from exc
            if route.same_partition:
                self._syncs[(topic, partition)].add(offset, target_offset)
            self._written[(topic, partition)] = offset

    def _emit_audit(self) -> None:
        if self.audit is None or not self._audit_counts:
            return
        counts, self._audit_counts = self._audit_counts, defaultdict(int)
        self.audit.add_counts(counts)

    def _emit_checkpoints(self) -> None:
        syncs = {tp: s for tp, s in self._syncs.items() if tp in self._owned}
        if not syncs:
            return
        try:
            written = self.checkpointer.emit(self._producer, syncs, self.policy.remote_topic)
        except Exception as exc:  # noqa: BLE001 - retried next round; copying goes on
            log.warning("checkpoints: %s", exc)
            return
        if written:
            self._flush()
            self.stats.checkpoints += written

    # ------------------------------------------------------------------ reporting

    def lag(self) -> int:
        """Records in the source not yet copied, over this process's partitions."""
        return sum(self.lag_by_partition().values())

    def lag_by_partition(self) -> dict[SourcePartition, int]:
        """Per partition of this process: the source's high watermark of the latest
        fetch (no extra request) minus the next offset to copy. Callable from any thread
        (the metrics endpoint's)."""
        positions, written = dict(self._positions), dict(self._written)
        lags: dict[SourcePartition, int] = {}
        for topic, partition in list(self._owned):
            _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            position = positions.get((topic, partition), written.get((topic, partition), 0))
            if high >= 0:
                lags[(topic, partition)] = max(0, high - position)
        return lags

    def owned_partitions(self) -> int:
        return len(self._owned)

    def _progress_line(self, last: tuple[float, int, int], now: float) -> str:
        seconds = max(now - last[0], 1e-9)
        self.rates = ((self.stats.records - last[1]) / seconds, (self.stats.bytes - last[2]) / seconds)
        return (f"mirror {self.config.source.alias}->{self.config.target.alias}: "
                f"{self.stats.records} records ({self.stats.bytes / 1e6:.1f} MB) copied, "
                f"{self.rates[0]:,.0f} records/s, {self.rates[1] / 1e6:.2f} MB/s, lag {self.lag()} records, "
                f"{len(self._owned)} partitions of {len(self._subscribed)} topics")


def _header_list(headers: Headers | dict[str, str | bytes | None] | None) -> Headers | None:
    """A consumed record's headers (confluent-kafka gives a list; its type also allows a dict)."""
    return list(headers.items()) if isinstance(headers, dict) else headers


def install_signal_handlers(mirror: Mirror) -> None:
    """SIGTERM and SIGINT stop the loop; progress is written before the process exits."""
    def handler(signum: int, frame: object) -> None:
        mirror.stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
