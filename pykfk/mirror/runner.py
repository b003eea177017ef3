"""One mirror process: consume the source (a consumer group shared by every process of
the same mirror), produce into the target, and keep progress, topics and checkpoints.

Delivery is at least once (docs/mirror.md, "Delivery guarantee"): the progress of a
partition is written only after the target acknowledged (acks=all, idempotent producer)
every record before it, and a restarted or newly assigned process resumes from the
progress in the target. Progress is written every ``progress.interval.ms`` and whenever
``progress.max.records`` records were copied since the last write, so a crash leaves at
most ``progress.max.records + consume.batch.records - 1`` records of this process's
partitions in the target twice; a rebalance leaves none (progress is written before
partitions are given up).
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    Producer,
    TopicPartition,
)

from pykfk.mirror.checkpoints import Checkpointer
from pykfk.mirror.config import MirrorConfig
from pykfk.mirror.naming import ORIGIN_HEADER, ReplicationPolicy
from pykfk.mirror.progress import OffsetSyncs, ProgressEntry, ProgressStore
from pykfk.mirror.topics import TopicSync

__all__ = ["Mirror", "MirrorError", "MirrorStats"]

log = logging.getLogger("pykfk.mirror")

# Longest the mirror waits for the target to acknowledge what it sent (seconds); past
# it the process stops rather than write progress it cannot vouch for.
FLUSH_TIMEOUT_S = 60
# How long one consume call may wait for records (seconds): the loop's tick.
CONSUME_WAIT_S = 0.1


class MirrorError(RuntimeError):
    """The target refused records or did not acknowledge them in time."""


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


class Mirror:
    """Copies the configured topics from ``config.source`` to ``config.target``.

    ``run()`` loops until ``stop()`` (any thread, or SIGTERM/SIGINT under ``main``).
    ``report`` gets the progress line every ``report.interval.ms``.
    """

    def __init__(self, config: MirrorConfig, report: Callable[[str], None] | None = None,
                 audit: Any = None):
        self.config = config
        self.report = report or (lambda line: print(line, file=sys.stderr, flush=True))
        self.policy = ReplicationPolicy(config.replication_policy, config.source.alias,
                                        config.target.alias, config.separator)
        self.topic_sync = TopicSync(config, self.policy)
        self.checkpointer = Checkpointer(config, self.topic_sync.source_admin)
        self.audit = audit
        self.stats = MirrorStats()
        self._stop = threading.Event()
        self._owned: set[tuple[str, int]] = set()
        self._positions: dict[tuple[str, int], int] = {}  # next source offset, records sent
        self._written: dict[tuple[str, int], int] = {}  # progress offset last written
        self._syncs: dict[tuple[str, int], OffsetSyncs] = defaultdict(OffsetSyncs)
        self._routes: dict[str, _Route] = {}
        self._subscribed: list[str] = []
        self._since_progress = 0
        self._audit_counts: dict[tuple[str, int], int] = defaultdict(int)
        self._delivery_errors: list[str] = []
        self._consumer = Consumer(self._consumer_config())
        self._producer = Producer(self._producer_config())
        self.progress = ProgressStore(config.target.client("consumer"), config.progress_topic)

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
        }
        if self.config.group_instance_id:
            settings["group.instance.id"] = self.config.group_instance_id
        return settings

    def _producer_config(self) -> dict[str, Any]:
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
            # Success is learned from flush(); only failures need a call per record.
            "delivery.report.only.error": True,
            "on_delivery": self._on_delivery,
        }

    def _on_delivery(self, error: Any, message: Any) -> None:
        if error is not None:
            self._delivery_errors.append(f"{message.topic()}[{message.partition()}]: {error}")

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        self._stop.set()

    def run(self, max_seconds: float | None = None) -> MirrorStats:
        """Mirror until stopped (or ``max_seconds``); progress is written on the way out."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        self._start()
        now = time.monotonic()
        due_progress = now + self.config.progress_interval_ms / 1000
        due_refresh = now + self.config.refresh_topics_interval_ms / 1000
        due_checkpoints = now + self.config.checkpoints_interval_ms / 1000
        due_report = now + self.config.report_interval_ms / 1000
        last_report = (now, 0, 0)
        try:
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
            self.write_progress()
        finally:
            self.close()
        return self.stats

    def _start(self) -> None:
        self.topic_sync.refresh_target()
        self.topic_sync.ensure_internal(self.config.progress_topic)
        if self.config.emit_checkpoints:
            self.topic_sync.ensure_internal(self.config.checkpoints_topic)
        self._refresh_topics()

    def close(self) -> None:
        """Leave the group (its revocation writes progress), flush, release clients."""
        try:
            self._consumer.close()
        finally:
            self._producer.flush(FLUSH_TIMEOUT_S)
            self.progress.close()

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

    def _first_sync(self, consumer: Consumer, topic: str, partition: int) -> None:
        """A partition copied from its start: every record from the source's log start
        on lands after the target's current end."""
        route = self._route(topic, partition)
        if route.same_partition:
            self._syncs[(topic, partition)].add(
                self.progress.source_start(consumer, topic, partition),
                self.progress.target_end(route.remote, partition))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.write_progress()
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self._owned.discard(key)
            self._positions.pop(key, None)
            self._written.pop(key, None)
            self._syncs.pop(key, None)
        consumer.unassign()

    # ------------------------------------------------------------------ copying

    def _copy(self, messages: list[Any]) -> None:
        producer, owned, positions = self._producer, self._owned, self._positions
        marks = self.policy.marks_records
        audit = self._audit_counts if self.audit is not None else None
        window = self.config.audit_window_ms
        copied = size = 0
        for message in messages:
            if message.error() is not None:
                self._consume_error(message.error())
                continue
            topic, partition = message.topic(), message.partition()
            if (topic, partition) not in owned:
                continue  # fetched before a revocation: the new owner copies it
            route = self._route(topic, partition)
            headers = message.headers()
            if marks:
                headers = self._mark(headers)
                if headers is None:
                    positions[(topic, partition)] = message.offset() + 1
                    self.stats.skipped_cycles += 1
                    continue
            key, value = message.key(), message.value()
            timestamp = message.timestamp()[1]
            self._produce(producer, route.remote, value, key,
                          partition if route.same_partition else -1,
                          max(0, timestamp), headers)
            positions[(topic, partition)] = message.offset() + 1
            copied += 1
            size += (len(key) if key else 0) + (len(value) if value else 0)
            if audit is not None:
                audit[(topic, timestamp - timestamp % window)] += 1
        producer.poll(0)
        self.stats.records += copied
        self.stats.bytes += size
        self._since_progress += copied

    @staticmethod
    def _produce(producer: Producer, topic: str, value: Any, key: Any, partition: int,
                 timestamp: int, headers: Any) -> None:
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

    def _mark(self, headers: Any) -> Any:
        """Identity naming: None for a record that came from the target, else the
        headers with the origin mark (added when absent)."""
        origin = self.policy.origin_of(headers)
        if origin == self.config.target.alias:
            return None
        if origin is not None:
            return headers
        return [*(headers or ()), (ORIGIN_HEADER, self.config.source.alias.encode())]

    def _consume_error(self, error: Any) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            return
        if error.fatal():
            raise MirrorError(f"source consumer: {error}")
        log.warning("source consumer: %s", error)

    # ------------------------------------------------------------------ progress

    def _flush(self) -> None:
        remaining = self._producer.flush(FLUSH_TIMEOUT_S)
        if remaining:
            raise MirrorError(f"{remaining} records not acknowledged by the target in {FLUSH_TIMEOUT_S} s")
        if self._delivery_errors:
            raise MirrorError("the target refused records: " + "; ".join(self._delivery_errors[:5]))

    def write_progress(self) -> None:
        """Wait for the target to have every record sent so far, then record where
        each partition stands (and the offset syncs, and the audit counts)."""
        changed = {tp: offset for tp, offset in self._positions.items()
                   if tp in self._owned and self._written.get(tp) != offset}
        self._since_progress = 0
        if not changed:
            return
        self._flush()
        self._emit_audit()
        for (topic, partition), offset in changed.items():
            route = self._route(topic, partition)
            target_partition = partition if route.same_partition else -1
            target_offset = (self.progress.target_end(route.remote, partition)
                             if route.same_partition else -1)
            entry = ProgressEntry(offset, route.remote, target_partition, target_offset)
            self.progress.write(self._producer, topic, partition, entry)
            if route.same_partition:
                self._syncs[(topic, partition)].add(offset, target_offset)
            self._written[(topic, partition)] = offset
        self._flush()
        self.stats.progress_writes += 1

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
        """Records in the source not yet copied, over this process's partitions, from
        the high watermarks of the latest fetches (no extra request)."""
        total = 0
        for topic, partition in list(self._owned):
            _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            position = self._positions.get((topic, partition), self._written.get((topic, partition), 0))
            if high >= 0:
                total += max(0, high - position)
        return total

    def _progress_line(self, last: tuple[float, int, int], now: float) -> str:
        seconds = max(now - last[0], 1e-9)
        rate = (self.stats.records - last[1]) / seconds
        mb_rate = (self.stats.bytes - last[2]) / seconds / 1e6
        return (f"mirror {self.config.source.alias}->{self.config.target.alias}: "
                f"{self.stats.records} records ({self.stats.bytes / 1e6:.1f} MB) copied, "
                f"{rate:,.0f} records/s, {mb_rate:.2f} MB/s, lag {self.lag()} records, "
                f"{len(self._owned)} partitions of {len(self._subscribed)} topics")


def install_signal_handlers(mirror: Mirror) -> None:
    """SIGTERM and SIGINT stop the loop; progress is written before the process exits."""
    def handler(signum: int, frame: Any) -> None:
        mirror.stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
