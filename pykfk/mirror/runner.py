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

Offset syncs (progress.py) go with the progress, and the audit counts too (audit.py).
A cluster that does not answer pauses the copy (health.py): the partitions are paused in
the consumer, what waits to be committed is tried again with a growing pause, and the
copy goes on by itself once the cluster answers.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

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

from pykfk.mirror.audit import MirrorAudit
from pykfk.mirror.checkpoints import Checkpointer
from pykfk.mirror.config import ClientConfig, MirrorConfig
from pykfk.mirror.errors import MirrorError
from pykfk.mirror.health import (
    CLIENT_ERRORS,
    ClusterState,
    TargetUnavailable,
    client_settings,
    flush_while_answered,
    metadata_pending,
    unreachable,
)
from pykfk.mirror.naming import ORIGIN_HEADER, Headers, ReplicationPolicy
from pykfk.mirror.progress import (
    READ_TIMEOUT_S,
    AuditRange,
    OffsetSyncs,
    ProgressEntry,
    ProgressStore,
)
from pykfk.mirror.stats import MirrorStats
from pykfk.mirror.topics import TopicSync
from pykfk.mirror.transactions import PartitionTransactions, TransactionAborted

if TYPE_CHECKING:  # prometheus_client is only needed with metrics.listener
    from pykfk.mirror.metrics import MirrorMetricsServer

__all__ = ["Mirror", "MirrorError", "MirrorStats"]

log = logging.getLogger("pykfk.mirror")

# Longest the mirror waits for the target to acknowledge what it sent (seconds); past
# it the process stops rather than write progress it cannot vouch for.
FLUSH_TIMEOUT_S = 60
# Longest a progress write waits for the next acknowledgement (at most FLUSH_TIMEOUT_S in
# all while they come), and a periodic call for an answer, before the cluster counts as
# unreachable and the work is tried again later.
PROGRESS_FLUSH_TIMEOUT_S = 5
ANSWER_TIMEOUT_S = 10
# How long the source may take to answer when its consumer lost every connection.
SOURCE_PROBE_TIMEOUT_S = 2
# How long one consume call may wait for records (seconds): the loop's tick.
CONSUME_WAIT_S = 0.1
# librdkafka's default transaction.timeout.ms: a transaction a dead process left open in
# the progress topic ends by then at the latest (aborted by the coordinator).
TRANSACTION_TIMEOUT_S = 60

# Room left in a batch for its header (61 bytes in Kafka's record batch v2) and slack.
BATCH_HEADER_MARGIN = 1024

# A source consumer that failed for good is replaced, at most this many times in the
# window (seconds); more means another process holds the same group.instance.id.
CONSUMER_FAILURES_MAX = 3
CONSUMER_FAILURE_WINDOW_S = 300

SourcePartition = tuple[str, int]
T = TypeVar("T")


class _ConsumerFailed(Exception):
    """The source consumer met a fatal error; a new one takes its place."""
# No offset sync is due: at-least-once copies take their syncs from progress writes.
NEVER = 1 << 62


@dataclass
class _Route:
    """Where records of one source topic go."""

    remote: str
    same_partition: bool
    partitions: int


class Mirror:
    """Copies the configured topics from ``config.source`` to ``config.target``.

    ``run()`` loops until ``stop()`` (any thread, or SIGTERM/SIGINT under ``main``).
    ``report`` gets the progress line every ``report.interval.ms``.
    """

    def __init__(self, config: MirrorConfig, report: Callable[[str], None] | None = None):
        self.config = config
        self.report = report or (lambda line: print(line, file=sys.stderr, flush=True))
        self.policy = ReplicationPolicy(config.replication_policy, config.source.alias,
                                        config.target.alias, config.separator)
        self.source_state = ClusterState("source", str(config.source.common["bootstrap.servers"]), self._status)
        self.target_state = ClusterState("target", str(config.target.common["bootstrap.servers"]), self._status)
        self.topic_sync = TopicSync(config, self.policy)
        self.checkpointer = Checkpointer(config, self.topic_sync.source_admin)
        self.audit: MirrorAudit | None = None
        if config.audit_bootstrap:
            same = config.audit_bootstrap == self.target_state.bootstrap
            self.audit = MirrorAudit(config, self.target_state if same else
                                     ClusterState("audit cluster", config.audit_bootstrap, self._status))
        self.stats = MirrorStats()
        self.rates = (0.0, 0.0)  # records/s and bytes/s over the last report interval
        self._stop = threading.Event()
        self._failed = False
        # The partitions this process copies -> the source offset from which the next
        # record copied gives an offset sync (its target offset; exactly once), NEVER at
        # least once: one lookup per record for both.
        self._owned: dict[SourcePartition, int] = {}
        self._positions: dict[SourcePartition, int] = {}  # next source offset, records sent
        self._written: dict[SourcePartition, int] = {}  # progress offset last written
        self._syncs: dict[SourcePartition, OffsetSyncs] = defaultdict(OffsetSyncs)
        # Offset syncs to write with the partition's next progress entry.
        self._new_syncs: dict[SourcePartition, list[tuple[int, int]]] = defaultdict(list)
        # Bumped when a partition's uncommitted copies are dropped: their late delivery
        # reports name aborted records.
        self._generation: dict[SourcePartition, int] = defaultdict(int)
        # Progress entries queued and waiting for their flush or commit: (entry, audit range).
        self._staged: dict[SourcePartition, tuple[ProgressEntry, AuditRange | None, list[tuple[int, int]]]] = {}
        self._paused = False
        self._assigned: dict[SourcePartition, int] = {}  # offset each partition was assigned at
        self._source_answered = False
        # Times the source consumer failed for good (its number is the count of them).
        self._consumer_failures: list[float] = []
        self._source_down: str | None = None  # the consumer said all its brokers are down
        self._routes: dict[str, _Route] = {}
        self._subscribed: list[str] = []
        self._since_progress = 0
        # (topic, partition, window start) -> records copied since the last progress entry
        self._audit_counts: dict[tuple[str, int, int], int] = defaultdict(int)
        self._delivery_errors: list[str] = []
        self._consumer = Consumer(self._consumer_config())
        # Idempotent, not transactional: every write at least once, and the checkpoints
        # in either mode (a checkpoint written twice is the same checkpoint).
        self._producer = Producer(self._producer_config())
        self.transactions = (PartitionTransactions(self._transactional_config(), config.transactional_id_prefix)
                             if config.exactly_once else None)
        self.progress = ProgressStore({**config.target.client("consumer"), **client_settings(self.target_state)},
                                      config.progress_topic, config.offset_syncs_topic)
        self._metrics: MirrorMetricsServer | None = None

    # ------------------------------------------------------------------ clients

    def _consumer_config(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "auto.offset.reset": "earliest" if self.config.start_from == "earliest" else "latest",
            "enable.partition.eof": False,
            "fetch.max.bytes": 16 << 20,
            **client_settings(self.source_state),
            # The copying consumer is never idle: all its connections down is an outage.
            "error_cb": partial(self._on_source_error, len(self._consumer_failures)),
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
            **client_settings(self.target_state),
            **self.config.target.client("producer"),
            "enable.idempotence": True,
            "acks": "all",
            # Success is learned from flush() (or the commit); only failures need a call per record.
            "delivery.report.only.error": True,
        }

    def _producer_config(self) -> dict[str, Any]:
        return {**self._client_producer_config(), "on_delivery": self._on_delivery}

    def _transactional_config(self) -> dict[str, Any]:
        # A failed record fails its transaction's commit; no callback needed, but the
        # records an offset sync is taken from report their target offset.
        return {**self._client_producer_config(), "delivery.report.only.error": False}

    def _on_delivery(self, error: KafkaError | None, message: Message) -> None:
        if error is None:
            return
        if message.topic() == self.config.checkpoints_topic:
            return  # the next round writes the group's checkpoint again
        self._delivery_errors.append(f"{message.topic()}[{message.partition()}]: {error}")

    def _confirm_source_down(self) -> None:
        """The consumer lost every connection: the source is down if it does not answer."""
        reason, self._source_down = self._source_down, None
        if self.source_state.down:
            return
        try:
            self.topic_sync.source_admin.probe(SOURCE_PROBE_TIMEOUT_S)
        except CLIENT_ERRORS:
            self.source_state.failed(reason or "")

    def _on_source_error(self, consumer_number: int, error: KafkaError) -> None:
        if consumer_number != len(self._consumer_failures):
            return  # a consumer that failed and was replaced, on its way out
        if error.code() == KafkaError._ALL_BROKERS_DOWN:
            # Judged by the loop: librdkafka also says so while it reconnects, or when a
            # consumer that failed for good lets its connections go.
            self._source_down = error.str()
        else:
            self.source_state.on_client_error(error)

    def _status(self, line: str) -> None:
        """A cluster's reachability changed (health.py): one line each time."""
        log.warning("%s", line)

    # ------------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        self._stop.set()

    def run(self, max_seconds: float | None = None) -> MirrorStats:
        """Mirror until stopped (or ``max_seconds``); progress is written on the way out."""
        deadline = None if max_seconds is None else time.monotonic() + max_seconds
        try:
            self._start()
            self._loop(deadline)
            self._last_progress()
        except BaseException:
            self._failed = True  # nothing more is written: the next start resumes
            raise
        finally:
            self.close()
        return self.stats

    def _last_progress(self) -> None:
        try:
            self.write_progress()
        except TargetUnavailable as exc:
            log.warning("progress not written (%s): the next start copies again from the last progress "
                        "written", exc)

    def _loop(self, deadline: float | None) -> None:
        now = time.monotonic()
        due_progress = now + self.config.progress_interval_ms / 1000
        due_refresh = now + self.config.refresh_topics_interval_ms / 1000
        due_checkpoints = now + self.config.checkpoints_interval_ms / 1000
        due_report = now + self.config.report_interval_ms / 1000
        last_report = (now, 0, 0)
        while not self._stop.is_set() and (deadline is None or time.monotonic() < deadline):
            try:
                self._copy(self._consumer.consume(self.config.consume_batch_records, CONSUME_WAIT_S))
            except _ConsumerFailed as exc:
                self._replace_consumer(str(exc))
            except TargetUnavailable as exc:  # a route or a partition's new producer could not be made
                if not self.source_state.down:
                    self.target_state.failed(str(exc))
                self._pause()  # the rest of the batch is fetched again
            if self._source_down is not None:
                self._confirm_source_down()
            now = time.monotonic()
            if self._since_progress >= self.config.progress_max_records or now >= due_progress:
                if self.target_state.ready():
                    self._progress_step()
                due_progress = now + self.config.progress_interval_ms / 1000
            if self.target_state.down and not self._paused:
                # Before the next fetch: a transaction whose commit is pending takes no records.
                self._pause()
            if self._paused and not self.target_state.down and not self._staged:
                self._resume()
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

    def _progress_step(self) -> None:
        """Write progress; while the target does not answer, find out when it does."""
        try:
            wrote = self.write_progress()
            if not wrote and self.target_state.down:
                self.topic_sync.refresh_target()  # nothing to write: just ask
        except TargetUnavailable as exc:
            self.target_state.failed(str(exc))
            return
        except CLIENT_ERRORS as exc:
            if not unreachable(exc):
                raise
            self.target_state.failed(_describe(exc))
            return
        if wrote or self.target_state.down:
            self.target_state.ok()

    def _pause(self) -> None:
        """Stop fetching while the target does not answer; each partition resumes at the
        next record to copy (what was fetched already is dropped, not skipped)."""
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.pause(assignment)
            for tp in assignment:
                try:
                    self._seek((tp.topic, tp.partition))
                except MirrorError as exc:  # not fetching yet: nothing fetched to drop
                    log.debug("%s", exc)
        self._paused = True

    def _resume(self) -> None:
        assignment = self._consumer.assignment()
        if assignment:
            self._consumer.resume(assignment)
        self._paused = False

    def _seek(self, partition: SourcePartition) -> None:
        offset = self._positions.get(partition, self._written.get(partition, self._assigned.get(partition)))
        if offset is None:
            return
        try:
            self._consumer.seek(TopicPartition(partition[0], partition[1], offset))
        except KafkaException as exc:
            raise MirrorError(f"{partition[0]}[{partition[1]}]: cannot go back to offset {offset}: "
                              f"{_describe(exc)}") from exc

    def _start(self) -> None:
        if self.config.metrics_listener is not None:
            self._metrics = self._metrics_server(*self.config.metrics_listener)
        self._until_answered(self.target_state, self._prepare_target)
        self._until_answered(self.source_state, self._refresh_topics_once)
        log.info("copying %s", "exactly once (transactions)" if self.transactions else "at least once")

    def _prepare_target(self) -> None:
        self.topic_sync.refresh_target()
        self.topic_sync.ensure_internal(self.config.progress_topic)
        self.topic_sync.ensure_internal(self.config.offset_syncs_topic)
        if self.config.emit_checkpoints:
            self.topic_sync.ensure_internal(self.config.checkpoints_topic)

    def _answer(self, state: ClusterState, call: Callable[[], T]) -> T:
        """``_until_answered`` for a call that returns a value."""
        answers: list[T] = []
        self._until_answered(state, lambda: answers.append(call()))
        return answers[0]

    def _until_answered(self, state: ClusterState, call: Callable[[], None]) -> None:
        """``call()`` until it does not fail for want of an answer (or the mirror stops)."""
        while True:
            try:
                call()
                state.ok()
                return
            except CLIENT_ERRORS as exc:
                if not unreachable(exc):
                    raise
                state.failed(_describe(exc))
            if self._stop.wait(state.seconds_to_retry()):
                raise MirrorError(f"stopped while the {state.role} {state.bootstrap} was unreachable")

    def _metrics_server(self, host: str, port: int) -> MirrorMetricsServer:
        try:
            from pykfk.mirror.metrics import MirrorMetricsServer
        except ImportError:
            raise MirrorError("metrics.listener needs the prometheus_client package: "
                              "pip install 'pykfk[metrics]'") from None
        return MirrorMetricsServer(self, host, port).start()

    def close(self) -> None:
        """Leave the group (its revocation writes progress), flush, release clients."""
        for state in (self.source_state, self.target_state, *([self.audit.state] if self.audit else [])):
            state.quiet()
        try:
            self._consumer.close()
        finally:
            flush_s = PROGRESS_FLUSH_TIMEOUT_S if self.target_state.down else FLUSH_TIMEOUT_S
            self._producer.flush(flush_s)
            if self.transactions is not None:
                self.transactions.close()
            if self.audit is not None:
                self.audit.close()
            self.progress.close()
            self.topic_sync.close()
            if self._metrics is not None:
                self._metrics.stop()

    # ------------------------------------------------------------------ topics

    def _refresh_topics(self) -> None:
        """The periodic topic sync; a cluster that does not answer is asked again later."""
        if not (self.source_state.ready() and self.target_state.ready()):
            return
        try:
            self._refresh_topics_once()
        except CLIENT_ERRORS as exc:
            if not unreachable(exc):
                raise
            # Whichever did not answer: the source's listing comes first.
            state = self.target_state if self._source_answered else self.source_state
            state.failed(_describe(exc))
            return
        self.source_state.ok()
        self.target_state.ok()

    def _refresh_topics_once(self) -> None:
        self._source_answered = False
        source = self.topic_sync.source_partitions()
        self._source_answered = True
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
            route = self._new_route(topic)
            self._routes[topic] = route
        return route

    def _new_route(self, topic: str) -> _Route:
        """A topic or partition the target may not have yet: sync that topic now."""
        try:
            source_count = self.topic_sync.source_partition_count(topic)
        except CLIENT_ERRORS as exc:
            if not unreachable(exc):
                raise
            self.source_state.failed(_describe(exc))
            raise TargetUnavailable(f"the source's partitions of {topic}: {_describe(exc)}") from None
        remote = self.policy.remote_topic(topic)
        try:
            self.topic_sync.refresh_target()
            self.topic_sync.sync_topic(topic, source_count)
        except CLIENT_ERRORS as exc:
            if not unreachable(exc):
                raise
            raise TargetUnavailable(f"the target's partitions of {remote}: {_describe(exc)}") from None
        target_count = self.topic_sync.target_partitions[remote]
        return _Route(remote, target_count == source_count, target_count)

    # ------------------------------------------------------------------ rebalance

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        try:
            self._assign(consumer, partitions)
        except (TargetUnavailable, TimeoutError) as exc:
            raise MirrorError(f"partitions assigned while the target does not answer ({exc}); "
                              "the next start takes them") from None

    def _assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self.transactions is not None:
            # Fence the previous holders before reading the progress they may still write.
            for tp in partitions:
                self.transactions.open((tp.topic, tp.partition), self._batch_limit(tp.topic))
            read_s = READ_TIMEOUT_S + TRANSACTION_TIMEOUT_S
        else:
            read_s = READ_TIMEOUT_S
        # A progress partition whose leader is unknown for a while (the target restarting)
        # is read again once it answers, from where the last read stopped.
        self._until_answered(self.target_state, lambda: self.progress.catch_up(read_s))
        start = OFFSET_BEGINNING if self.config.start_from == "earliest" else OFFSET_END
        for tp in partitions:
            key = (tp.topic, tp.partition)
            entry = self.progress.entries.get(key)
            tp.offset = entry.offset if entry is not None else start
            self._assigned[key] = tp.offset
            if key in self.progress.history:
                self._syncs[key] = self.progress.history[key].copy()
            if entry is not None:
                self._written[key] = entry.offset
                if self.audit is not None and entry.audit:
                    self.audit.add(key, entry.audit)  # committed, maybe never published
            if self.transactions is None:
                self._resume_sync(consumer, key, entry)
            # Exactly once, the first record copied gives a sync (its target offset).
            self._owned[key] = -1 if self.transactions is not None else NEVER
        consumer.assign(partitions)
        if self._paused:
            consumer.pause(partitions)
        log.info("assigned %d partitions", len(partitions))

    def _batch_limit(self, topic: str) -> ClientConfig:
        """A batch of one transactional producer holds records of one remote topic: keep
        it within that topic's max.message.bytes, or the target refuses it (and the
        transaction with it). The record batch header is 61 bytes; librdkafka counts the
        per-record framing in batch.size itself."""
        limit = self.topic_sync.max_message_bytes(self.policy.remote_topic(topic)) - BATCH_HEADER_MARGIN
        configured = int(self._client_producer_config()["batch.size"])
        return {"batch.size": max(1, min(configured, limit))}

    def _resume_sync(self, consumer: Consumer, partition: SourcePartition, entry: ProgressEntry | None) -> None:
        """At least once: records copied from here on land after the target's current
        end (copies a dead process left are before it). Written with the next progress."""
        route = self._route(*partition)
        if not route.same_partition:
            return
        if entry is not None:
            source_offset = entry.offset
        elif self.config.start_from == "earliest":
            source_offset = self._answer(self.source_state, lambda: self.progress.source_start(consumer, *partition))
        else:
            return
        sync = (source_offset, self._answer(self.target_state,
                                            lambda: self.progress.target_end(route.remote, partition[1])))
        self._syncs[partition].add(*sync)
        self._new_syncs[partition].append(sync)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if consumer is not self._consumer:  # a failed consumer, replaced: its partitions went with it
            with contextlib.suppress(KafkaException):
                consumer.unassign()
            return
        if not self._failed:
            self._last_progress()
        for tp in partitions:
            self._release((tp.topic, tp.partition))
        consumer.unassign()

    def _release(self, key: SourcePartition) -> None:
        """Drop a partition given up (its progress written, if it could be)."""
        self._forget(key)
        self._owned.pop(key, None)
        self._written.pop(key, None)
        self._syncs.pop(key, None)
        self._assigned.pop(key, None)
        if self.audit is not None:
            self.audit.drop(key)
        if self.transactions is not None:
            self.transactions.release(key)

    def _replace_consumer(self, reason: str) -> None:
        """The source consumer failed for good (librdkafka's fatal errors: a static member
        fenced, as after the group coordinator restarted): write the progress, give up its
        partitions and join the group with a new consumer. Repeated failures mean another
        process holds the same group.instance.id: the process stops."""
        now = time.monotonic()
        self._consumer_failures.append(now)
        recent = sum(1 for t in self._consumer_failures if now - t < CONSUMER_FAILURE_WINDOW_S)
        if recent > CONSUMER_FAILURES_MAX:
            raise MirrorError(f"the source consumer failed {recent} times in "
                              f"{CONSUMER_FAILURE_WINDOW_S} s ({reason}); does another process use "
                              f"group.instance.id {self.config.group_instance_id!r}?")
        log.warning("source consumer failed (%s); joining the group again", reason)
        self._last_progress()
        for key in list(self._owned):
            self._release(key)
        self._source_down = None
        failed, self._consumer = self._consumer, Consumer(self._consumer_config())
        with contextlib.suppress(KafkaException, RuntimeError):
            failed.close()
        self._paused = False
        if self._subscribed:
            self._consumer.subscribe(self._subscribed, on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _forget(self, partition: SourcePartition) -> None:
        """Drop what was copied of ``partition`` and not written as progress."""
        self._positions.pop(partition, None)
        self._staged.pop(partition, None)
        self._new_syncs.pop(partition, None)
        self._generation[partition] += 1
        for key in [k for k in self._audit_counts if k[0] == partition[0] and k[1] == partition[1]]:
            del self._audit_counts[key]

    def _rewind(self, partition: SourcePartition) -> None:
        """The partition's open transaction was aborted: copy again from its progress."""
        self._forget(partition)
        if partition in self._owned:
            self._owned[partition] = -1
        self._seek(partition)

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
            key = (topic, partition)
            sync_due = owned.get(key)
            if sync_due is None:
                continue  # fetched before a revocation: the new owner copies it
            headers = _header_list(message.headers())
            if marks:
                headers = self._mark(headers)
                if headers is None:
                    positions[key] = offset + 1
                    self.stats.skipped_cycles += 1
                    continue
            if offset >= sync_due:
                size = self._copy_sync(message, key, offset, headers)
            else:
                size = self._copy_one(message, topic, partition, headers)
            positions[key] = offset + 1
            counts = by_topic[topic]
            counts[0] += 1
            counts[1] += size
            if audit is not None:
                timestamp = message.timestamp()[1]
                audit[(topic, partition, timestamp - timestamp % window)] += 1
        self._poll_producers()
        if by_topic:
            self._count(by_topic)
            if self.source_state.down:
                self.source_state.ok()

    def _copy_one(self, message: Message, topic: str, partition: int, headers: Headers | None) -> int:
        """Send one record to its remote topic; returns its key + value bytes."""
        route = self._route(topic, partition)
        producer = self._producer_of((topic, partition))
        key, value = message.key(), message.value()
        try:
            self._produce(producer, route.remote, value, key, partition if route.same_partition else -1,
                          max(0, message.timestamp()[1]), headers)
        except KafkaException as exc:  # a failed producer takes no more records
            raise self._produce_failure((topic, partition), route.remote, exc) from exc
        return (len(key) if key else 0) + (len(value) if value else 0)

    def _copy_sync(self, message: Message, partition: SourcePartition, offset: int, headers: Headers | None) -> int:
        """``_copy_one`` for a record whose target offset becomes an offset sync (exactly
        once, every offset.lag.max source offsets): its delivery report gives the offset."""
        self._owned[partition] = offset + self.config.offset_lag_max
        route = self._route(*partition)
        if not route.same_partition:
            return self._copy_one(message, partition[0], partition[1], headers)
        generation = self._generation[partition]

        def delivered(error: KafkaError | None, sent: Message) -> None:
            if error is None and self._generation[partition] == generation:
                self._new_syncs[partition].append((offset, int(sent.offset() or 0)))

        key, value = message.key(), message.value()
        producer = self._producer_of(partition)
        try:
            _produce_reported(producer, route.remote, value, key, partition[1], max(0, message.timestamp()[1]),
                              headers, delivered)
        except KafkaException as exc:
            raise self._produce_failure(partition, route.remote, exc) from exc
        return (len(key) if key else 0) + (len(value) if value else 0)

    def _poll_producers(self) -> None:
        self._plain(lambda producer: producer.poll(0))
        if self.transactions is not None:
            self.transactions.poll()
        if self.audit is not None:
            self.audit.poll()

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

    def _produce_failure(self, partition: SourcePartition, remote: str, exc: KafkaException) -> Exception:
        """What a produce call that raised ``exc`` means: the target partition's metadata
        momentarily unknown (the record was not queued; the copy pauses and fetches it
        again), else the producer's refusal."""
        if metadata_pending(exc):
            return TargetUnavailable(f"{remote}[{partition[1]}]: {_describe(exc)}")
        return self._refusal(partition, exc)

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
        if error.fatal() or error.code() == KafkaError._FATAL:
            raise _ConsumerFailed(error.str())
        if error.code() in (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE):
            self.source_state.failed()
            return
        log.warning("source consumer: %s", error)

    # ------------------------------------------------------------------ progress

    def _flush(self) -> None:
        """Wait for the target's acknowledgements while it gives some (health.py)."""
        remaining = self._plain(lambda producer: flush_while_answered(producer, PROGRESS_FLUSH_TIMEOUT_S,
                                                                      FLUSH_TIMEOUT_S))
        if self._delivery_errors:
            raise MirrorError("the target refused records: " + "; ".join(self._delivery_errors[:5]))
        if remaining:
            raise TargetUnavailable(f"{remaining} records not acknowledged")

    def write_progress(self) -> bool:
        """Record where each partition stands (with its offset syncs and audit counts)
        once the target holds every record sent so far: acknowledged, or (exactly once)
        committed in the same transaction as the progress. Returns whether anything was
        written; TargetUnavailable when the target did not answer in time (what was
        staged is committed by the next call)."""
        changed = {tp: offset for tp, offset in self._positions.items()
                   if tp in self._owned and tp not in self._staged and self._written.get(tp) != offset}
        self._since_progress = 0
        if not changed and not self._staged:
            return False
        if self.transactions is None:
            self._progress_at_least_once(changed)
        else:
            self._progress_exactly_once(changed)
        self.stats.progress_writes += 1
        return True

    def _progress_at_least_once(self, changed: dict[SourcePartition, int]) -> None:
        if changed:
            self._flush()
            for partition, offset in changed.items():
                self._stage(partition, offset, self._producer)
        self._flush()
        for partition in list(self._staged):
            self._finish(partition)

    def _progress_exactly_once(self, changed: dict[SourcePartition, int]) -> None:
        transactions = self.transactions
        assert transactions is not None
        for partition in sorted(changed.keys() | self._staged.keys()):
            try:
                if partition not in self._staged:
                    if transactions.has_open(partition):
                        transactions.flush([partition], PROGRESS_FLUSH_TIMEOUT_S)
                    self._stage(partition, changed[partition], transactions.producer(partition))
                transactions.commit(partition)
            except TransactionAborted as exc:
                log.warning("%s; copying %s[%d] again from offset %s", exc, partition[0], partition[1],
                            self._written.get(partition, self._assigned.get(partition)))
                self._rewind(partition)
                continue
            self._finish(partition)

    def _stage(self, partition: SourcePartition, offset: int, producer: Producer) -> None:
        """Queue the partition's offset syncs and progress entry (with its audit counts)
        on the producer its records went through; ``_finish`` once they are written."""
        topic, number = partition
        route = self._route(topic, number)
        target_offset = self._target_end(route.remote, number) if route.same_partition else -1
        audit_range = None
        if self.audit is not None:
            windows = self._take_audit_counts(partition)
            audit_range = AuditRange(offset, windows) if windows else None
        pending = self.audit.pending(partition) if self.audit is not None else ()
        entry = ProgressEntry(offset, route.remote, number if route.same_partition else -1, target_offset,
                              pending + ((audit_range,) if audit_range is not None else ()))
        syncs = self._new_syncs.pop(partition, [])
        if route.same_partition:
            syncs.append((offset, target_offset))
        try:
            for upstream, downstream in syncs:
                self.progress.write_sync(producer, topic, number, upstream, downstream)
            self.progress.write(producer, topic, number, entry)
        except KafkaException as exc:  # a failed transaction takes no progress entry
            raise self._refusal(partition, exc) from exc
        self._staged[partition] = (entry, audit_range, syncs)

    def _finish(self, partition: SourcePartition) -> None:
        entry, audit_range, syncs = self._staged.pop(partition)
        self._written[partition] = entry.offset
        partition_syncs = self._syncs[partition]
        for upstream, downstream in syncs:
            partition_syncs.add(upstream, downstream)
        if self.audit is not None and audit_range is not None:
            self.audit.add(partition, (audit_range,))

    def _target_end(self, topic: str, partition: int) -> int:
        try:
            return self.progress.target_end(topic, partition, ANSWER_TIMEOUT_S)
        except KafkaException as exc:
            if unreachable(exc):
                raise TargetUnavailable(f"end offset of {topic}[{partition}]: {_describe(exc)}") from None
            raise

    def _take_audit_counts(self, partition: SourcePartition) -> tuple[tuple[int, int], ...]:
        topic, number = partition
        taken = sorted((k[2], n) for k, n in self._audit_counts.items() if k[0] == topic and k[1] == number)
        for window, _ in taken:
            del self._audit_counts[(topic, number, window)]
        return tuple(taken)

    def _emit_checkpoints(self) -> None:
        if self.source_state.down or self.target_state.down:
            return
        syncs = {tp: s for tp, s in self._syncs.items() if tp in self._owned}
        if not syncs:
            return
        try:
            written = self.checkpointer.emit(self._producer, syncs, self.policy.remote_topic)
        except Exception as exc:  # noqa: BLE001 - retried next round; copying goes on
            log.warning("checkpoints: %s", exc)
            return
        # Delivered with the other writes of the idempotent producer (no wait here).
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


def _produce_reported(producer: Producer, topic: str, value: bytes | None, key: bytes | None, partition: int,
                      timestamp: int, headers: Headers | None, on_delivery: Callable[[KafkaError | None, Message], None],
                      ) -> None:
    """``Mirror._produce`` for a record whose delivery report is wanted."""
    deadline = None
    while True:
        try:
            producer.produce(topic, value, key, partition, on_delivery=on_delivery, timestamp=timestamp,
                             headers=headers)
            return
        except BufferError:
            deadline = deadline or time.monotonic() + FLUSH_TIMEOUT_S
            if time.monotonic() > deadline:
                raise MirrorError(f"the target took no records for {FLUSH_TIMEOUT_S} s") from None
            producer.poll(0.05)


def _describe(exc: BaseException) -> str:
    error = exc.args[0] if exc.args else None
    return f"{error.name()}: {error.str()}" if isinstance(error, KafkaError) else str(exc) or type(exc).__name__


def _header_list(headers: Headers | dict[str, str | bytes | None] | None) -> Headers | None:
    """A consumed record's headers (confluent-kafka gives a list; its type also allows a dict)."""
    return list(headers.items()) if isinstance(headers, dict) else headers


def install_signal_handlers(mirror: Mirror) -> None:
    """SIGTERM and SIGINT stop the loop; progress is written before the process exits."""
    def handler(signum: int, frame: object) -> None:
        mirror.stop()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
