"""The logs of one broker over its ``log.dirs`` (apache/kafka ``LogManager``).

Per log dir::

    meta.properties                   broker.id, cluster.id, version
    .lock                             held (flock) while a broker uses the dir
    .kafka_cleanshutdown              present only between a clean shutdown and the next start
    recovery-point-offset-checkpoint  per partition: offsets below are flushed
    cleaner-offset-checkpoint         per compacted partition: offsets below are clean
    log-start-offset-checkpoint       per partition: first readable offset
    replication-offset-checkpoint     per partition: high watermark
    <topic>-<partition>/              one Log
    <topic>-<partition>.<id>-delete/  a deleted log waiting for file.delete.delay.ms

Threads: ``open`` and ``shutdown`` block (call them before the loop serves requests, or
through ``aclose``); ``get_log`` / ``create_log`` / ``delete_log`` run on the loop thread.
``start`` runs retention, time-based flushes, checkpoints and the log cleaner (compaction)
as asyncio tasks whose disk work goes to a worker thread, never the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

from pykfk.errors import ErrorCode, KafkaError
from pykfk.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_CHECKPOINT,
    CheckpointError,
    has_clean_shutdown_marker,
    read_meta_properties,
    read_offset_checkpoint,
    remove_clean_shutdown_marker,
    write_clean_shutdown_marker,
    write_meta_properties,
    write_offset_checkpoint,
)
from pykfk.log.cleaner import DEFAULT_DEDUPE_BUFFER_SIZE, CleanStats, LogCleaner
from pykfk.log.config import LogConfig
from pykfk.log.log import (
    CONFIG_CHANGES,
    DELETE_DIR_SUFFIX,
    OFFSET_MOVES,
    Log,
    parse_partition_dir,
    time_ms,
)
from pykfk.log.naming import topic_name_error
from pykfk.metrics.stats import FlushStats

logger = logging.getLogger("pykfk.log")

# The offset checkpoints of a log dir, in the order of the offsets read from each log:
# recovery point, log start offset, high watermark.
_CHECKPOINT_FILES = (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, REPLICATION_CHECKPOINT)

LOCK_FILE = ".lock"
META_VERSION = "0"

# Kafka's legal topic names (Topic.LEGAL_CHARS, MAX_NAME_LENGTH).

# Intervals at or above this are "never" (Kafka uses Long.MAX_VALUE); asyncio cannot
# sleep that long.
_NEVER_MS = 10 * 365 * 24 * 3600 * 1000

TopicPartition = tuple[str, int]


class InconsistentBrokerMetadataError(RuntimeError):
    """meta.properties of a log dir names another broker or cluster."""


class LogDirInUseError(RuntimeError):
    """Another process holds the log dir's lock."""


def validate_topic_name(topic: str) -> None:
    problem = topic_name_error(topic)
    if problem is not None:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)


class _BackgroundScheduler:
    """The Scheduler handed to every Log: runs work on the manager's worker thread,
    delayed through the event loop once ``start`` gave it one. Before that (no loop) work
    without delay runs inline and delayed work waits for the next sweep."""

    def __init__(self, executor: concurrent.futures.Executor):
        self.executor = executor
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def schedule(self, delay_ms: int, fn: Callable[[], Any]) -> None:
        if self.closed:
            return
        loop = self.loop
        if loop is None or loop.is_closed():
            if delay_ms <= 0:
                _run_logged(fn)
            return
        if delay_ms <= 0:
            self._submit(fn)
            return
        try:
            loop.call_soon_threadsafe(loop.call_later, delay_ms / 1000, self._submit, fn)
        except RuntimeError:  # loop closed meanwhile; the next sweep catches up
            pass

    def _submit(self, fn: Callable[[], Any]) -> None:
        if self.closed:
            return
        try:
            self.executor.submit(_run_logged, fn)
        except RuntimeError:  # executor shut down
            pass


def _run_logged(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:
        logger.exception("Background log task %r failed", fn)


class LogManager:
    """Opens, creates, deletes and maintains the partition logs of one broker.

    ``config_for(topic)`` gives a topic's LogConfig (default: ``default_config`` for all).
    """

    def __init__(
        self,
        log_dirs: list[str],
        default_config: LogConfig,
        *,
        broker_id: int,
        cluster_id: str | None = None,
        config_for: Callable[[str], LogConfig] | None = None,
        retention_check_interval_ms: int = 300_000,  # log.retention.check.interval.ms
        flush_check_interval_ms: int = 1000,  # log.flush.scheduler.interval.ms
        checkpoint_interval_ms: int = 60_000,  # log.flush.offset.checkpoint.interval.ms
        producer_id_expiration_ms: int = 86_400_000,  # producer.id.expiration.ms
        cleaner_enable: bool = True,  # log.cleaner.enable
        cleaner_backoff_ms: int = 15_000,  # log.cleaner.backoff.ms
        cleaner_dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE,  # log.cleaner.dedupe.buffer.size
    ):
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate entries in log dirs {log_dirs}")
        self.default_config = default_config
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.config_for = config_for or (lambda topic: self.default_config)
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_check_interval_ms = flush_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.cleaner = (LogCleaner(dedupe_buffer_size=cleaner_dedupe_buffer_size)
                        if cleaner_enable else None)
        self._logs: dict[TopicPartition, Log] = {}
        self._logs_changes = 0  # logs added or removed: the count keys caches of _logs
        # The logs with a flush.ms, as of (_logs_changes, CONFIG_CHANGES.count).
        self._flushed_on_time: tuple[tuple[int, int], list[Log]] = ((-1, -1), [])
        self.flush_stats = FlushStats()  # every log's flushes (the broker metrics)
        # Logs per dir, kept as logs come and go: choosing a dir for a new partition is
        # O(1) in the number of partitions (counting them each time was quadratic).
        self._dir_counts: dict[str, int] = dict.fromkeys(self.log_dirs, 0)
        # Content of each checkpoint file as last written (unchanged ones are not rewritten).
        self._checkpointed: dict[str, dict[TopicPartition, int]] = {}
        # Per log dir, its logs and their (recovery point, log start, high watermark) at
        # the last write of all three checkpoints.
        self._checkpointed_rows: dict[str, tuple[list[TopicPartition], list[tuple[int, int, int]]]] = {}
        self._checkpointed_moves = (-1, -1)  # (OFFSET_MOVES.count, _logs_changes) at the last pass
        self._lock = threading.RLock()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="pykfk-log")
        self._scheduler = _BackgroundScheduler(self._executor)
        self._lock_fds: dict[str, int] = {}
        self._high_watermark_checkpoints: dict[TopicPartition, int] = {}
        self._pending_log_deletes: list[tuple[int, Log]] = []
        self._tasks: list[asyncio.Task[Any]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opened = False
        self._shut_down = False

    # -- start -------------------------------------------------------------------------

    def open(self) -> None:
        """Locks every log dir, checks meta.properties and loads every log, recovering
        those of a dir that was not shut down cleanly. Blocking."""
        if self._opened:
            return
        started = time.monotonic()
        try:
            for log_dir in self.log_dirs:
                self._open_dir(log_dir)
        except BaseException:
            self._release_locks()
            raise
        self._opened = True
        logger.info("Loaded %d logs from %d log dirs in %.0f ms", len(self._logs),
                    len(self.log_dirs), (time.monotonic() - started) * 1000)

    def _open_dir(self, log_dir: str) -> None:
        os.makedirs(log_dir, exist_ok=True)
        self._lock_dir(log_dir)
        self._check_meta_properties(log_dir)
        clean = has_clean_shutdown_marker(log_dir)
        recovery_points = self._read_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT)
        log_starts = self._read_checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT)
        self._high_watermark_checkpoints.update(
            self._read_checkpoint(log_dir, REPLICATION_CHECKPOINT))
        names = []
        for name in sorted(os.listdir(log_dir)):
            path = os.path.join(log_dir, name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                logger.info("Removing %s, a log deleted before the last stop", path)
                shutil.rmtree(path, ignore_errors=True)
                continue
            try:
                topic, partition = parse_partition_dir(name)
            except ValueError:
                continue
            names.append((topic, partition, path))
        if not names:
            # A new dir, or one whose logs were all deleted: nothing to load or recover,
            # whether or not the clean-shutdown marker is there.
            logger.info("No logs to load in %s", log_dir)
        elif clean:
            logger.info("Loading %d logs in %s after a clean shutdown", len(names), log_dir)
        else:
            logger.warning("Loading %d logs in %s after an unclean shutdown: recovering "
                           "unflushed segments", len(names), log_dir)
        for i, (topic, partition, path) in enumerate(names, start=1):
            tp = (topic, partition)
            if tp in self._logs:
                raise RuntimeError(f"duplicate log directories for {topic}-{partition}: "
                                   f"{self._logs[tp].dir} and {path}")
            log = Log(path, self.config_for(topic),
                      recovery_point=recovery_points.get(tp, 0),
                      log_start_offset=log_starts.get(tp, 0),
                      clean_shutdown=clean, scheduler=self._scheduler)
            log.flush_stats = self.flush_stats
            self._logs[tp] = log
            self._logs_changes += 1
            self._dir_counts[log_dir] += 1
            logger.info("Loaded log %s-%d (%d/%d, %d%%) in %s", topic, partition, i, len(names),
                        i * 100 // len(names), log_dir)
        # From here on a crash must trigger recovery.
        remove_clean_shutdown_marker(log_dir)

    def _lock_dir(self, log_dir: str) -> None:
        fd = os.open(os.path.join(log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogDirInUseError(f"log dir {log_dir} is in use by another process") from None
        self._lock_fds[log_dir] = fd

    def _release_locks(self) -> None:
        for fd in self._lock_fds.values():
            os.close(fd)  # closing the descriptor drops the flock
        self._lock_fds.clear()

    def _check_meta_properties(self, log_dir: str) -> None:
        path = os.path.join(log_dir, META_PROPERTIES)
        props = read_meta_properties(path)
        if props is None:
            new = {}
            if self.cluster_id is not None:
                new["cluster.id"] = self.cluster_id
            new["version"] = META_VERSION
            new["broker.id"] = str(self.broker_id)
            write_meta_properties(path, new)
            return
        if props.get("broker.id") not in (None, str(self.broker_id)):
            raise InconsistentBrokerMetadataError(
                f"{path} belongs to broker.id {props['broker.id']}, this broker is "
                f"{self.broker_id}")
        stored_cluster = props.get("cluster.id")
        if stored_cluster is not None:
            if self.cluster_id is not None and stored_cluster != self.cluster_id:
                raise InconsistentBrokerMetadataError(
                    f"{path} belongs to cluster {stored_cluster}, this broker joins "
                    f"{self.cluster_id}")
            self.cluster_id = stored_cluster
        elif self.cluster_id is not None:
            write_meta_properties(path, {"cluster.id": self.cluster_id, "version": META_VERSION,
                                         "broker.id": str(self.broker_id)})

    @staticmethod
    def _read_checkpoint(log_dir: str, name: str) -> dict[TopicPartition, int]:
        path = os.path.join(log_dir, name)
        try:
            return read_offset_checkpoint(path)
        except CheckpointError as exc:
            # Without recovery points every log is recovered from its start: slower, safe.
            logger.warning("Ignoring unreadable checkpoint: %s", exc)
            return {}

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Starts the background tasks on ``loop`` (the running loop by default)."""
        if self._tasks:
            return
        self._loop = loop or asyncio.get_running_loop()
        self._scheduler.loop = self._loop
        jobs = (
            ("retention", self.retention_check_interval_ms, self.run_retention),
            ("flush", self.flush_check_interval_ms, self.flush_dirty),
            ("checkpoint", self.checkpoint_interval_ms, self.write_checkpoints),
            ("cleaner", self.cleaner_backoff_ms if self.cleaner else 0, self.run_cleaner),
        )
        for name, interval_ms, fn in jobs:
            if 0 < interval_ms < _NEVER_MS:
                self._tasks.append(self._loop.create_task(
                    self._every(interval_ms, fn, name), name=f"pykfk-log-{name}"))

    async def _every(self, interval_ms: int, fn: Callable[[], Any], name: str) -> None:
        loop = asyncio.get_running_loop()
        while not self._shut_down:
            await asyncio.sleep(interval_ms / 1000)
            if self._shut_down:  # shutdown() runs on another thread; its cancel may lag
                return
            try:
                await loop.run_in_executor(self._executor, fn)
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._shut_down:
                    return
                logger.exception("Background %s pass failed", name)

    # -- logs ------------------------------------------------------------------------------

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def partition_counts(self) -> dict[str, int]:
        """Number of logs per log dir."""
        return dict(self._dir_counts)

    def next_log_dir(self) -> str:
        """The log dir with the fewest partitions (the first listed on a tie)."""
        counts = self._dir_counts
        return min(self.log_dirs, key=counts.__getitem__)

    def create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        """The log of a partition, created empty in the least loaded log dir when it does
        not exist yet."""
        validate_topic_name(topic)
        if partition < 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, f"partition {partition} < 0")
        with self._lock:
            existing = self._logs.get((topic, partition))
            if existing is not None:
                return existing
            log_dir = self.next_log_dir()
            log = Log(os.path.join(log_dir, f"{topic}-{partition}"),
                      config or self.config_for(topic), scheduler=self._scheduler,
                      clean_shutdown=True, new=True)
            log.flush_stats = self.flush_stats
            self._logs[(topic, partition)] = log
            self._logs_changes += 1
            self._dir_counts[log_dir] += 1
        logger.debug("Created log %s-%d in %s", topic, partition, log_dir)
        return log

    def in_current_log_dir(self, log: Log, write: Callable[[str], Any]) -> bool:
        """Calls ``write(log.dir)`` if ``log`` is still its partition's log (neither
        deleted nor replaced, which wait meanwhile); False if it is not."""
        with self._lock:
            if self._logs.get((log.topic, log.partition)) is not log:
                return False
            write(log.dir)
            return True

    def delete_log(self, topic: str, partition: int) -> bool:
        """Removes a partition's log: renamed to ``*-delete`` now, files removed after
        file.delete.delay.ms (readers may still hold regions). False if there was none."""
        with self._lock:
            log = self._logs.pop((topic, partition), None)
            if log is None:
                return False
            self._logs_changes += 1
            self._high_watermark_checkpoints.pop((topic, partition), None)
            parent = os.path.dirname(log.dir)
            if parent in self._dir_counts:
                self._dir_counts[parent] -= 1
        log.rename_for_delete()
        delay = log.config.file_delete_delay_ms
        with self._lock:
            self._pending_log_deletes.append((time_ms() + delay, log))
        self._scheduler.schedule(delay, self._sweep_deleted_logs)
        logger.info("Scheduled deletion of log %s-%d (%s)", topic, partition, log.dir)
        return True

    def _sweep_deleted_logs(self, *, force: bool = False) -> int:
        now = time_ms()
        with self._lock:
            due = [(d, log) for d, log in self._pending_log_deletes if force or d <= now]
            self._pending_log_deletes = [p for p in self._pending_log_deletes if p not in due]
        for _, log in due:
            log.delete()
        return len(due)

    def high_watermark_checkpoint(self, topic: str, partition: int) -> int | None:
        """The high watermark stored at the last checkpoint before this start (for the
        replica manager; the Log itself follows its log end offset until told otherwise)."""
        return self._high_watermark_checkpoints.get((topic, partition))

    # -- background work (blocking; run on a worker thread) ---------------------------------

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        now = time_ms() if now_ms is None else now_ms
        deleted = 0
        starts_moved = False
        for log in list(self._logs.values()):
            before = log.log_start_offset
            try:
                deleted += log.delete_retained_segments(now)
                log.remove_expired_producers(now, self.producer_id_expiration_ms)
            except Exception:
                logger.exception("Retention of log %s failed", log.name)
            starts_moved |= log.log_start_offset != before
        self._sweep_deleted_logs()
        if starts_moved:
            self.write_log_start_offset_checkpoints()
        return deleted

    def run_cleaner(self, now_ms: int | None = None) -> list[CleanStats]:
        """One pass of the log cleaner over the compacted logs (see pykfk.log.cleaner)."""
        if self.cleaner is None or self._shut_down:
            return []
        return self.cleaner.clean_logs(list(self._logs.values()), now_ms)

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Flushes every log whose flush.ms has passed; returns how many were flushed."""
        now = time_ms() if now_ms is None else now_ms
        flushed = 0
        for log in self._logs_flushed_on_time():
            if log.flush_due(now):
                try:
                    log.flush()
                    flushed += 1
                except Exception:
                    logger.exception("Flush of log %s failed", log.name)
        return flushed

    def _logs_flushed_on_time(self) -> list[Log]:
        """The logs with a flush.ms (by default none), found again only when logs or
        configs have changed: asking each log every second was half of an idle broker's
        CPU at 10,000 partitions."""
        with self._lock:
            changes = (self._logs_changes, CONFIG_CHANGES.count)
            if self._flushed_on_time[0] != changes:
                self._flushed_on_time = (changes, [log for log in self._logs.values() if log.flushes_on_time])
            return self._flushed_on_time[1]

    def flush_all(self) -> None:
        for log in list(self._logs.values()):
            log.flush()

    def write_checkpoints(self, *, every_log: bool = False) -> None:
        """The three offset checkpoints of every log dir; unless ``every_log``, nothing at
        all is read when no log was added or removed and no log's offsets moved since
        the last pass."""
        moves = (OFFSET_MOVES.count, self._logs_changes)  # read before the pass, which then sees them
        if moves == self._checkpointed_moves and not every_log:
            return
        self._write_per_dir(_CHECKPOINT_FILES)
        self._checkpointed_moves = moves

    def _write_per_dir(self, names: tuple[str, ...]) -> None:
        """Writes the checkpoints ``names`` in every log dir whose content changed since
        its last write. Each log's three offsets are read once, and a dir whose logs and
        offsets are all as at its last write is passed over whole: an idle broker of
        10,000 partitions rewrites nothing and spends a few ms a pass (building each
        file's mapping every time took 80 ms every 5 s)."""
        with self._lock:
            entries = list(self._logs.items())
        for log_dir, in_dir in self._logs_per_dir(entries).items():
            keys = [tp for tp, _log in in_dir]
            rows = [log.checkpointed_offsets() for _tp, log in in_dir]
            if self._checkpointed_rows.get(log_dir) == (keys, rows):
                continue
            for column, name in enumerate(_CHECKPOINT_FILES):
                if name not in names:
                    continue
                offsets = {tp: row[column] for tp, row in zip(keys, rows)}
                path = os.path.join(log_dir, name)
                if self._checkpointed.get(path) != offsets:
                    write_offset_checkpoint(path, offsets)
                    self._checkpointed[path] = offsets
            if names == _CHECKPOINT_FILES:
                self._checkpointed_rows[log_dir] = (keys, rows)
            else:  # the files now hold offsets of different moments
                self._checkpointed_rows.pop(log_dir, None)

    def _logs_per_dir(self, entries: list[tuple[TopicPartition, Log]]) -> dict[str, list[tuple[TopicPartition, Log]]]:
        if len(self.log_dirs) == 1:
            return {self.log_dirs[0]: entries}
        per_dir: dict[str, list[tuple[TopicPartition, Log]]] = {d: [] for d in self.log_dirs}
        for tp, log in entries:
            in_dir = per_dir.get(log.dir.rpartition(os.sep)[0])
            if in_dir is not None:
                in_dir.append((tp, log))
        return per_dir

    def write_log_start_offset_checkpoints(self) -> None:
        self._write_per_dir((LOG_START_OFFSET_CHECKPOINT,))

    # -- stop ------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stops background work, flushes and closes every log, writes the checkpoints and
        the clean-shutdown marker (only for dirs whose logs all closed cleanly). Blocking."""
        if self._shut_down:
            return
        self._shut_down = True
        self._cancel_tasks()
        self._scheduler.closed = True
        self._executor.shutdown(wait=True)
        failed_dirs = set()
        for log in list(self._logs.values()):
            try:
                log.close()
            except Exception:
                logger.exception("Closing log %s failed; its dir will be recovered at the "
                                 "next start", log.name)
                failed_dirs.add(os.path.dirname(log.dir))
        self._sweep_deleted_logs(force=True)
        if self._opened:
            self.write_checkpoints(every_log=True)
            for log_dir in self.log_dirs:
                if log_dir not in failed_dirs:
                    write_clean_shutdown_marker(log_dir)
        self._release_locks()
        logger.info("Log manager shut down (%d logs)", len(self._logs))

    def _cancel_tasks(self) -> None:
        tasks, self._tasks = self._tasks, []
        if not tasks or self._loop is None or self._loop.is_closed():
            return
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        for task in tasks:
            if on_loop:
                task.cancel()
            else:
                self._loop.call_soon_threadsafe(task.cancel)

    async def aclose(self) -> None:
        """``shutdown`` from a coroutine: cancels the tasks, then does the blocking part
        on a worker thread."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self.shutdown)
