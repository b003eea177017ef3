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

Log dir states (Kafka's KIP-112, plus a free-space floor):

- online;
- low: free space under ``log.dir.free.bytes.min``: appends to clients' topics are
  refused (KAFKA_STORAGE_ERROR) while the internal topics, checkpoints and producer
  snapshots still have room; back online once the space is there again;
- full: a write failed with ENOSPC: every append is refused until the free space is
  back above the floor (and RESUME_FREE_BYTES); reads go on in both;
- offline: any other I/O error (EIO on a write, an fsync, an open): the dir's logs are
  closed to appends, flushes and reads (their partitions answer KAFKA_STORAGE_ERROR and
  lose their leadership in a cluster) until the dir passes a write probe (every
  ``log.dir.check.interval.ms``, or ``probe_offline_dirs``): its logs are then loaded
  again with recovery.
Each change of state is logged once, with the dir and the cause; listeners
(``dir_listeners``, the replica manager) hear of dirs going offline and coming back.

Threads: ``open`` and ``shutdown`` block (call them before the loop serves requests, or
through ``aclose``); ``get_log`` / ``create_log`` / ``delete_log`` run on the loop thread.
``start`` runs retention, time-based flushes, checkpoints and the log cleaner (compaction)
as asyncio tasks whose disk work goes to a worker thread, never the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from pykfk.clock import SYSTEM_CLOCK, Clock
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
)
from pykfk.log.naming import topic_name_error

FUTURE_DIR_SUFFIX = "-future"
_SEGMENT_FILES = (".log", ".index", ".timeindex", ".txnindex")
from pykfk.metrics.stats import FlushStats

logger = logging.getLogger("pykfk.log")

# Log dir states.
ONLINE, LOW, FULL, OFFLINE = "online", "low", "full", "offline"
# After ENOSPC, appends resume once at least this much is free (and the floor).
RESUME_FREE_BYTES = 1 << 20
PROBE_FILE = ".pykfk-probe"

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

    def __init__(self, executor: concurrent.futures.Executor,
                 immediate: concurrent.futures.Executor | None = None):
        self.executor = executor
        # Work without delay (fsyncs a produce may wait for) runs here, not behind a
        # retention or cleaner pass.
        self.immediate = immediate or executor
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
            self._submit(fn, self.immediate)
            return
        try:
            loop.call_soon_threadsafe(loop.call_later, delay_ms / 1000, self._submit_delayed, fn)
        except RuntimeError:  # loop closed meanwhile; the next sweep catches up
            pass

    def _submit_delayed(self, fn: Callable[[], Any]) -> None:
        self._submit(fn)

    def _submit(self, fn: Callable[[], Any], executor: concurrent.futures.Executor | None = None) -> None:
        if self.closed:
            return
        try:
            (executor or self.executor).submit(_run_logged, fn)
        except RuntimeError:  # executor shut down
            pass


# New logs' background work waits until no log was created for this long (see HeldScheduler).
NEW_LOGS_QUIET_S = 0.05


class HeldScheduler:
    """The Scheduler of logs created in one burst (a topic of thousands of partitions):
    work without delay they schedule (their first segment's index files, two new files a
    partition, see ``log._NewSegments``) waits until ``release``, which the log manager
    calls once no log has been created for NEW_LOGS_QUIET_S. The creation then has the
    file system and the interpreter to itself for what it must make before it answers (a
    directory and a .log a partition); made alongside, the index files took a third of
    it. After ``release`` everything goes straight to the manager's scheduler (a flush
    asked for meanwhile, flush.messages, waits at most until then)."""

    def __init__(self, target: _BackgroundScheduler):
        self._target = target
        self._lock = threading.Lock()
        self._held: list[Callable[[], Any]] | None = []

    def schedule(self, delay_ms: int, fn: Callable[[], Any]) -> None:
        if delay_ms <= 0 and self._held is not None:
            with self._lock:
                if self._held is not None:
                    self._held.append(fn)
                    return
        self._target.schedule(delay_ms, fn)

    def release(self) -> None:
        """Hands the held work on, in the order it came; idempotent."""
        with self._lock:
            held, self._held = self._held, None
        for fn in held or ():
            self._target.schedule(0, fn)


def _run_logged(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except KafkaError as exc:
        if exc.code != ErrorCode.KAFKA_STORAGE_ERROR:
            raise
        logger.debug("Background log task %r: %s", fn, exc)  # the dir's state change was logged
    except Exception:
        logger.exception("Background log task %r failed", fn)


def _copy_from(source: str, target: str, start: int, pace: Callable[[int], None] | None = None) -> int:
    """Copies ``source`` from byte ``start`` into ``target`` (kept up to ``start``,
    cut there), fsynced; returns the bytes copied. ``pace`` is told each MiB copied
    (and may sleep)."""
    with open(source, "rb") as src, open(target, "r+b" if start else "wb") as dst:
        src.seek(start)
        dst.truncate(start)
        dst.seek(start)
        if pace is None:
            shutil.copyfileobj(src, dst, 1 << 20)
        else:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                pace(len(chunk))
        dst.flush()
        os.fsync(dst.fileno())
        return dst.tell() - start


def _future_partition(name: str) -> TopicPartition | None:
    """The partition of a future dir name (``<topic>-<partition>.<id>-future``)."""
    try:
        return parse_partition_dir(name[:-len(FUTURE_DIR_SUFFIX)].rsplit(".", 1)[0])
    except ValueError:
        return None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ioctl(2) numbers and the flag of ext2/3/4's "top of directory hierarchies" (chattr +T).
_FS_IOC_GETFLAGS = 0x80086601
_FS_IOC_SETFLAGS = 0x40086602
_FS_TOPDIR_FL = 0x00020000


def _mark_top_of_hierarchies(log_dir: str) -> None:
    """Marks ``log_dir`` as the top of unrelated directory trees (ext2/3/4's
    FS_TOPDIR_FL, ``chattr +T``), so the file system spreads the partition directories
    made in it over its block groups like home directories, instead of crowding them
    into the groups next to the log dir. There, every new inode was looked for past the
    inodes other programs had deleted in the last minutes: 0.1-0.8 ms a file on a busy
    ext4 without a journal, 5 files a partition. Best effort: other file systems refuse
    the flag, and nothing else changes."""
    try:
        fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        flags = int.from_bytes(fcntl.ioctl(fd, _FS_IOC_GETFLAGS, bytes(8))[:4], "little")
        if not flags & _FS_TOPDIR_FL:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, (flags | _FS_TOPDIR_FL).to_bytes(8, "little"))
    except OSError as exc:
        logger.debug("%s: the file system keeps its own placement of new directories (%s)", log_dir, exc)
    finally:
        os.close(fd)


def _is_out_of_space(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _free_bytes(log_dir: str) -> int:
    stats = os.statvfs(log_dir)
    return stats.f_bavail * stats.f_frsize


def probe_dir(log_dir: str) -> None:
    """Writes, fsyncs, reads back and removes a small file in ``log_dir``; raises OSError
    when any step fails."""
    path = os.path.join(log_dir, PROBE_FILE)
    data = os.urandom(64)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        if os.pread(fd, len(data), 0) != data:
            raise OSError(errno.EIO, "the probe file read back different bytes")
    finally:
        os.close(fd)
    os.unlink(path)


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
        min_free_bytes: int = 0,  # log.dir.free.bytes.min
        alert_free_bytes: int = 0,  # log.dir.free.bytes.alert
        dir_check_interval_ms: int = 1000,  # log.dir.check.interval.ms
        floor_exempt_topics: tuple[str, ...] = (),  # written below the floor (internal topics)
        clock: Clock = SYSTEM_CLOCK,
    ):
        if not log_dirs:
            raise ValueError("at least one log dir is required")
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if len(set(self.log_dirs)) != len(self.log_dirs):
            raise ValueError(f"duplicate entries in log dirs {log_dirs}")
        self.default_config = default_config
        self.clock = clock  # every read of time, the logs' too
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.config_for = config_for or (lambda topic: self.default_config)
        self.retention_check_interval_ms = retention_check_interval_ms
        self.flush_check_interval_ms = flush_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.cleaner_backoff_ms = cleaner_backoff_ms
        self.cleaner = (LogCleaner(dedupe_buffer_size=cleaner_dedupe_buffer_size, clock=clock)
                        if cleaner_enable else None)
        self._logs: dict[TopicPartition, Log] = {}
        # Partitions whose log is in a dir that could not be loaded at start.
        self._stranded: dict[TopicPartition, str] = {}
        # Future dirs of log moves the last stop interrupted (AlterReplicaLogDirs): the
        # broker resumes them once it runs (pykfk.server.log_dir_moves).
        self._interrupted_moves: dict[TopicPartition, str] = {}
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
        self._flush_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="pykfk-flush")
        self._scheduler = _BackgroundScheduler(self._executor, self._flush_executor)
        # The scheduler of the logs being created in a burst, and when the last was made.
        self._burst: HeldScheduler | None = None
        self._burst_last = 0.0
        self.min_free_bytes = min_free_bytes
        self.alert_free_bytes = alert_free_bytes
        self.dir_check_interval_ms = dir_check_interval_ms
        self.floor_exempt_topics = frozenset(floor_exempt_topics)
        self._dir_state: dict[str, str] = dict.fromkeys(self.log_dirs, ONLINE)
        self._dir_cause: dict[str, str] = {}
        self._low_space: set[str] = set()  # dirs whose alert is raised
        self.free_bytes: dict[str, int] = {}  # at the last check
        # Told (on the loop) of a dir going offline or coming back: (dir, state, partitions).
        self.dir_listeners: list[Callable[[str, str, list[TopicPartition]], None]] = []
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
        started = self.clock.monotonic()
        try:
            for log_dir in self.log_dirs:
                try:
                    self._open_dir(log_dir)
                except OSError as exc:
                    if len(self.log_dirs) == 1:
                        raise
                    # Kafka's way with several dirs: the broker starts without this one,
                    # and its partitions wait for it (made nowhere else meanwhile).
                    self._forget_dir_logs(log_dir)
                    self._strand_partitions(log_dir)
                    self._mark_offline(log_dir, f"loading failed: {exc}")
            if all(state == OFFLINE for state in self._dir_state.values()):
                raise OSError(errno.EIO, f"no usable log dir among {self.log_dirs}")
        except BaseException:
            self._release_locks()
            raise
        self._opened = True
        logger.info("Loaded %d logs from %d log dirs in %.0f ms", len(self._logs),
                    len(self.log_dirs), (self.clock.monotonic() - started) * 1000)

    def _open_dir(self, log_dir: str) -> None:
        for log in self._load_dir(log_dir):
            self._insert(log_dir, log)

    def _insert(self, log_dir: str, log: Log) -> None:
        tp = (log.topic, log.partition)
        if tp in self._logs:
            raise RuntimeError(f"duplicate log directories for {log.topic}-{log.partition}: "
                               f"{self._logs[tp].dir} and {log.dir}")
        self._adopt(log)
        self._logs[tp] = log
        self._logs_changes += 1
        self._dir_counts[log_dir] += 1

    def _load_dir(self, log_dir: str, recovery_points: dict[TopicPartition, int] | None = None) -> Iterator[Log]:
        """The logs of ``log_dir``, each loaded (and recovered after an unclean stop) as
        it is asked for; ``recovery_points`` override the checkpoint's (a dir loaded
        again after it was offline: the recovery points it had then)."""
        os.makedirs(log_dir, exist_ok=True)
        self._lock_dir(log_dir)
        self._check_meta_properties(log_dir)
        _mark_top_of_hierarchies(log_dir)
        clean = has_clean_shutdown_marker(log_dir)
        checkpointed = self._read_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT)
        starts_from = checkpointed if recovery_points is None else {**checkpointed, **recovery_points}
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
            if name.endswith(FUTURE_DIR_SUFFIX):
                # A move between log dirs the stop interrupted: its source is intact. At
                # start it is kept for the broker to resume; a dir back from offline drops it.
                tp = _future_partition(name)
                if recovery_points is None and tp is not None and tp not in self._interrupted_moves:
                    logger.info("Found %s, the copy of a log move the last stop interrupted", path)
                    self._interrupted_moves[tp] = path
                else:
                    logger.info("Removing %s, the copy of an interrupted log move", path)
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
        elif recovery_points is not None:
            logger.info("Loading %d logs in %s again after it was offline: recovering unflushed segments",
                        len(names), log_dir)
        else:
            logger.warning("Loading %d logs in %s after an unclean shutdown: recovering "
                           "unflushed segments", len(names), log_dir)
        for i, (topic, partition, path) in enumerate(names, start=1):
            tp = (topic, partition)
            yield Log(path, self.config_for(topic),
                      recovery_point=starts_from.get(tp, 0),
                      log_start_offset=log_starts.get(tp, 0),
                      clean_shutdown=clean, scheduler=self._scheduler, clock=self.clock)
            logger.info("Loaded log %s-%d (%d/%d, %d%%) in %s", topic, partition, i, len(names),
                        i * 100 // len(names), log_dir)
        # From here on a crash must trigger recovery.
        remove_clean_shutdown_marker(log_dir)

    def _strand_partitions(self, log_dir: str) -> None:
        try:
            names = os.listdir(log_dir)
        except OSError:
            return
        for name in names:
            with contextlib.suppress(ValueError):
                if not name.endswith(DELETE_DIR_SUFFIX):
                    self._stranded[parse_partition_dir(name)] = log_dir

    def _adopt(self, log: Log) -> None:
        log.flush_stats = self.flush_stats
        log.io_error_handler = self._on_log_io_error
        state = self._dir_state.get(os.path.dirname(log.dir))
        if state is not None and state != ONLINE:
            log.refuse_appends(self._refusal(os.path.dirname(log.dir), state, log.topic))

    def _lock_dir(self, log_dir: str) -> None:
        if log_dir in self._lock_fds:  # a dir loaded again after it was offline
            return
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
            ("dirs", self.dir_check_interval_ms, self.check_dirs),
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
                # Dir checks must not wait behind a long retention or cleaner pass.
                await loop.run_in_executor(self._flush_executor if name == "dirs" else self._executor, fn)
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
        """The online log dir with room (not offline, full or under its free-space
        floor) holding the fewest partitions (the first listed on a tie); KafkaError
        KAFKA_STORAGE_ERROR when there is none."""
        counts = self._dir_counts
        usable = [d for d in self.log_dirs if self._dir_state[d] == ONLINE]
        if not usable:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self.placement_problem() or "no usable log dir")
        return min(usable, key=counts.__getitem__)

    def placement_problem(self) -> str | None:
        """Why no new partition can be placed on this broker now, or None."""
        if any(state == ONLINE for state in self._dir_state.values()):
            return None
        states = ", ".join(f"{d} is {self._dir_state[d]} ({self._dir_cause.get(d, '')})"
                           for d in self.log_dirs)
        return f"no log dir can take a new partition: {states}"

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
            stranded = self._stranded.get((topic, partition))
            if stranded is not None:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"the log of {topic}-{partition} is in the offline log dir {stranded}")
            log_dir = self.next_log_dir()
            path = os.path.join(log_dir, f"{topic}-{partition}")
            existed = os.path.exists(path)
            try:
                log = Log(path, config or self.config_for(topic), scheduler=self._new_log_scheduler(),
                          clean_shutdown=True, new=True, clock=self.clock)
            except OSError as exc:
                self.report_dir_error(log_dir, exc)
                if not existed:  # no half-made partition left behind
                    shutil.rmtree(path, ignore_errors=True)
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                 f"creating the log of {topic}-{partition} in {log_dir} failed: {exc}") from None
            self._adopt(log)
            self._logs[(topic, partition)] = log
            self._logs_changes += 1
            self._dir_counts[log_dir] += 1
        logger.debug("Created log %s-%d in %s", topic, partition, log_dir)
        return log

    def _new_log_scheduler(self) -> _BackgroundScheduler | HeldScheduler:
        """The scheduler of a log being created (under ``_lock``): the current burst's,
        which the loop releases once creations stop (see HeldScheduler). Without a loop
        (before ``start``) the manager's own."""
        loop = self._scheduler.loop
        if loop is None or loop.is_closed() or self._shut_down:
            return self._scheduler
        # The loop's own time, which its call_later counts in: a test's manual clock must
        # not hold the burst.
        self._burst_last = loop.time()
        burst = self._burst
        if burst is None:
            burst = self._burst = HeldScheduler(self._scheduler)
            try:
                loop.call_soon_threadsafe(self._release_when_quiet, burst)
            except RuntimeError:  # the loop closed meanwhile
                self._burst = None
                burst.release()
        return burst

    def _release_when_quiet(self, burst: HeldScheduler) -> None:
        """On the loop: releases ``burst`` once no log was created for NEW_LOGS_QUIET_S."""
        with self._lock:
            if self._burst is burst:
                loop = self._scheduler.loop
                wait = NEW_LOGS_QUIET_S - ((loop.time() if loop is not None else 0.0) - self._burst_last)
                if wait > 0 and loop is not None and not loop.is_closed() and not self._shut_down:
                    loop.call_later(wait, self._release_when_quiet, burst)
                    return
                self._burst = None
        burst.release()

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
            self._pending_log_deletes.append((self.clock.time_ms() + delay, log))
        self._scheduler.schedule(delay, self._sweep_deleted_logs)
        logger.info("Scheduled deletion of log %s-%d (%s)", topic, partition, log.dir)
        return True

    # -- moves between log dirs (AlterReplicaLogDirs) -------------------------------------

    def move_problem(self, topic: str, partition: int, log_dir: str) -> tuple[ErrorCode, str] | None:
        """Why the log of a partition cannot move to ``log_dir`` now, as Kafka answers it."""
        if log_dir not in self.log_dirs:
            return ErrorCode.LOG_DIR_NOT_FOUND, f"Log dir {log_dir} is not a log dir of this broker"
        if self._dir_state[log_dir] != ONLINE:
            return ErrorCode.KAFKA_STORAGE_ERROR, f"Log dir {log_dir} is {self._dir_state[log_dir]}"
        if (topic, partition) in self._stranded:
            return ErrorCode.KAFKA_STORAGE_ERROR, f"The log of {topic}-{partition} is in an offline log dir"
        if self._logs.get((topic, partition)) is None:
            return ErrorCode.REPLICA_NOT_AVAILABLE, f"{topic}-{partition} has no replica on this broker"
        return None

    def take_interrupted_moves(self) -> dict[TopicPartition, str]:
        """The future dirs of moves the last stop interrupted, found at start (once)."""
        found, self._interrupted_moves = self._interrupted_moves, {}
        return found

    @staticmethod
    def future_dir(log: Log, log_dir: str) -> str:
        """Where the copy of a moving log grows (Kafka's ``<topic>-<partition>.<id>-future``)."""
        return os.path.join(log_dir, f"{log.topic}-{log.partition}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}")

    @staticmethod
    def copy_for_move(log: Log, future: str, pace: Callable[[int], None] | None = None) -> int:
        """Brings the future dir up to the log's files as they are now: a segment's .log
        grown since the last pass gets its new tail (all of it when it shrank: cleaned),
        indexes and other files are copied when they differ (the active segment's always,
        they change in place; an empty active segment's as sparse files), files the log
        dropped are removed. Returns the bytes copied. Blocking, for a worker thread
        while the log takes appends; ``pace`` is told the bytes as they are copied."""
        os.makedirs(future, exist_ok=True)
        copied = 0
        present = set()
        active = log.active_segment
        active_prefix = f"{active.base_offset:020d}."
        for name in os.listdir(log.dir):
            source = os.path.join(log.dir, name)
            if not os.path.isfile(source):
                continue
            present.add(name)
            target = os.path.join(future, name)
            size = os.path.getsize(source)
            had = os.path.getsize(target) if os.path.exists(target) else -1
            in_active = name.startswith(active_prefix)
            if name.endswith(_SEGMENT_FILES) and had == size and not in_active:
                continue
            if in_active and active.size == 0 and name.endswith(_SEGMENT_FILES):
                with open(target, "wb") as dst:
                    dst.truncate(size)  # an empty segment's preallocated indexes: zeros
                continue
            start = had if name.endswith(".log") and 0 <= had <= size else 0
            copied += _copy_from(source, target, start, pace)
        for name in os.listdir(future):
            if name not in present:
                os.unlink(os.path.join(future, name))
        return copied

    def finish_move(self, log: Log, future: str) -> Log:
        """The swap: the last appends copied, the future dir renamed to the partition's
        dir, the old one renamed for deletion (readers keep their descriptors), the new
        log opened (its active segment recovered) and put in the old one's place. The
        caller has stopped the partition's replica. Blocking but short."""
        tp = (log.topic, log.partition)
        log_dir = os.path.dirname(future)
        target = os.path.join(log_dir, f"{log.topic}-{log.partition}")
        log.roll(reason="move to another log dir")  # what remains to copy is sealed
        log.flush()
        self.copy_for_move(log, future)
        with self._lock:
            if self._logs.get(tp) is not log:
                raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{log.name} changed during its move")
            recovery_point = log.active_segment.base_offset  # only the new, empty segment is checked
            start, high_watermark = log.log_start_offset, log.high_watermark
            os.rename(future, target)
            _fsync_dir(log_dir)
            try:
                moved = Log(target, log.config, recovery_point=recovery_point, log_start_offset=start,
                            clean_shutdown=False, scheduler=self._scheduler, clock=self.clock)
            except BaseException:
                shutil.rmtree(target, ignore_errors=True)  # the log stays where it was
                raise
            self._logs.pop(tp)
            self._dir_counts[os.path.dirname(log.dir)] -= 1
            log.rename_for_delete()
            self._pending_log_deletes.append((self.clock.time_ms() + log.config.file_delete_delay_ms, log))
            self._high_watermark_checkpoints[tp] = high_watermark
            self._insert(log_dir, moved)
        self._scheduler.schedule(log.config.file_delete_delay_ms, self._sweep_deleted_logs)
        logger.info("Moved log %s to %s", moved.name, log_dir)
        return moved

    def _sweep_deleted_logs(self, *, force: bool = False) -> int:
        now = self.clock.time_ms()
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

    # -- log dir states ------------------------------------------------------------------

    def dir_state(self, log_dir: str) -> str:
        return self._dir_state[log_dir]

    def dir_cause(self, log_dir: str) -> str | None:
        """What put the dir in its state (None while online)."""
        return self._dir_cause.get(log_dir) if self._dir_state[log_dir] != ONLINE else None

    def offline_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if self._dir_state[d] == OFFLINE]

    def low_space_dirs(self) -> list[str]:
        """Dirs whose free space is under log.dir.free.bytes.alert (the alert raised)."""
        return sorted(self._low_space)

    def _on_log_io_error(self, log: Log, exc: OSError) -> None:
        self.report_dir_error(os.path.dirname(log.dir), exc)

    def report_dir_error(self, log_dir: str, exc: OSError, *, offline: bool = False) -> None:
        """An I/O error of a file in ``log_dir``: out of space marks it full, anything
        else (or any error with ``offline``: a write that cannot wait for space) takes
        it offline. Any thread."""
        if log_dir not in self._dir_state:
            return
        if _is_out_of_space(exc) and not offline:
            self._mark_full(log_dir, f"out of space ({exc.strerror})")
        else:
            self._mark_offline(log_dir, f"{exc.strerror or exc} (errno {exc.errno})")

    def _refusal(self, log_dir: str, state: str, topic: str) -> str | None:
        """Why a log of ``topic`` in a dir in ``state`` refuses appends, or None."""
        if state == ONLINE or (state == LOW and topic in self.floor_exempt_topics):
            return None
        if state == LOW:
            return (f"log dir {log_dir} has less than log.dir.free.bytes.min={self.min_free_bytes} "
                    f"bytes free")
        return f"log dir {log_dir} is {state}: {self._dir_cause.get(log_dir, '')}"

    def _set_state(self, log_dir: str, state: str, cause: str | None) -> bool:
        """Moves ``log_dir`` to ``state`` and tells its logs; False when it was there."""
        with self._lock:
            old = self._dir_state[log_dir]
            if old == state or old == OFFLINE and state != ONLINE:
                return False
            self._dir_state[log_dir] = state
            if cause is not None:
                self._dir_cause[log_dir] = cause
            if state != OFFLINE:
                for log in self._logs_in(log_dir):
                    log.refuse_appends(self._refusal(log_dir, state, log.topic))
        return True

    def _logs_in(self, log_dir: str) -> list[Log]:
        prefix = log_dir + os.sep
        return [log for log in self._logs.values() if log.dir.startswith(prefix)]

    def _mark_full(self, log_dir: str, cause: str) -> None:
        if self._set_state(log_dir, FULL, cause):
            logger.warning("Log dir %s is full: %s; appends are refused until space is free again "
                           "(reads go on)", log_dir, cause)

    def _mark_offline(self, log_dir: str, cause: str) -> None:
        with self._lock:
            if not self._set_state(log_dir, OFFLINE, cause):
                return
            logs = self._logs_in(log_dir)
        # Outside the manager's lock: an append failing on the loop thread holds its
        # log's lock while it reports here.
        reason = f"log dir {log_dir} is offline: {cause}"
        for log in logs:
            log.go_offline(reason)
        partitions = [(log.topic, log.partition) for log in logs]
        partitions += [tp for tp, where in self._stranded.items() if where == log_dir]
        logger.error("Log dir %s is offline: %s; its %d partitions are offline until it passes a "
                     "write probe", log_dir, cause, len(partitions))
        self._tell_listeners(log_dir, OFFLINE, partitions)

    def _tell_listeners(self, log_dir: str, state: str, partitions: list[TopicPartition]) -> None:
        loop = self._loop
        for listener in list(self.dir_listeners):
            if loop is None or loop.is_closed():
                listener(log_dir, state, partitions)
            else:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(listener, log_dir, state, partitions)

    def check_dirs(self) -> None:
        """Measures the free space of every dir (states low and full, the alert) and
        probes the offline ones. Blocking."""
        for log_dir in self.log_dirs:
            if self._shut_down:
                return
            if self._dir_state[log_dir] == OFFLINE:
                self.probe_offline_dir(log_dir)
                continue
            try:
                free = _free_bytes(log_dir)
            except OSError as exc:
                self.report_dir_error(log_dir, exc)
                continue
            self.free_bytes[log_dir] = free
            self._check_alert(log_dir, free)
            self._check_floor(log_dir, free)

    def _check_alert(self, log_dir: str, free: int) -> None:
        low = free < self.alert_free_bytes
        if low == (log_dir in self._low_space):
            return
        if low:
            self._low_space.add(log_dir)
            logger.warning("Log dir %s is low on space: %d bytes free, under log.dir.free.bytes.alert=%d",
                           log_dir, free, self.alert_free_bytes)
        else:
            self._low_space.discard(log_dir)
            logger.info("Log dir %s has %d bytes free again (log.dir.free.bytes.alert=%d)", log_dir, free,
                        self.alert_free_bytes)

    def _check_floor(self, log_dir: str, free: int) -> None:
        state = self._dir_state[log_dir]
        if state == FULL:
            if free >= max(self.min_free_bytes, RESUME_FREE_BYTES) and self._set_state(log_dir, ONLINE, None):
                logger.info("Log dir %s has %d bytes free again: appends resume", log_dir, free)
        elif free < self.min_free_bytes:
            if self._set_state(log_dir, LOW, f"{free} bytes free"):
                logger.warning("Log dir %s has %d bytes free, under log.dir.free.bytes.min=%d: produce "
                               "to its partitions is refused (internal topics still written)",
                               log_dir, free, self.min_free_bytes)
        elif state == LOW and self._set_state(log_dir, ONLINE, None):
            logger.info("Log dir %s has %d bytes free again, log.dir.free.bytes.min=%d: produce resumes",
                        log_dir, free, self.min_free_bytes)

    def probe_offline_dir(self, log_dir: str) -> bool:
        """An offline dir that passes a write probe comes back: its logs are loaded again
        (recovering what follows their recovery points) and listeners told. Returns
        whether it is online. Blocking."""
        if self._dir_state[log_dir] != OFFLINE:
            return True
        try:
            probe_dir(log_dir)
        except OSError:
            return False
        try:
            meta = read_meta_properties(os.path.join(log_dir, META_PROPERTIES))
        except (OSError, CheckpointError):
            meta = None
        if meta is None:
            # Not the file system that failed (an unmounted disk leaves its empty mount
            # point): loading it would pass for partitions that lost their data.
            self._dir_cause[log_dir] = f"{META_PROPERTIES} is missing: not the dir that went offline"
            return False
        with self._lock:
            old = self._logs_in(log_dir)
        for log in old:
            log.release_files()
        # Loaded (and recovered) without the manager's lock, which the loop takes to
        # create logs; the dir stays offline meanwhile, so nothing new is placed in it.
        loaded: list[Log] = []
        try:
            loaded.extend(self._load_dir(log_dir, {(log.topic, log.partition): log.recovery_point for log in old}))
        except OSError as exc:
            for log in loaded:
                log.release_files()
            self._dir_cause[log_dir] = f"loading after a probe failed: {exc}"
            logger.warning("Log dir %s passed a write probe but loading its logs failed: %s", log_dir, exc)
            return False
        with self._lock:
            for log in old:
                # The high watermark known before the failure does not go back.
                self._high_watermark_checkpoints[(log.topic, log.partition)] = log.high_watermark
            self._forget_dir_logs(log_dir)
            self._dir_state[log_dir] = ONLINE
            self._dir_cause.pop(log_dir, None)
            for tp in [tp for tp, where in self._stranded.items() if where == log_dir]:
                del self._stranded[tp]
            for log in loaded:
                if (log.topic, log.partition) in self._logs:  # made in another dir meanwhile
                    logger.warning("%s: leaving %s alone, the partition's log is elsewhere now", log.name, log.dir)
                    log.release_files()
                    continue
                self._insert(log_dir, log)
            self._drop_unsynced(old)
            partitions = [(log.topic, log.partition) for log in self._logs_in(log_dir)]
        logger.info("Log dir %s passed a write probe and is online again: %d partitions loaded with "
                    "recovery", log_dir, len(partitions))
        self._tell_listeners(log_dir, ONLINE, partitions)
        return True

    def _drop_unsynced(self, old: list[Log]) -> None:
        """A log whose fsync failed and whose appends wait for their fsync (flush.messages,
        flush.ms) loses what follows its recovery point: none of it was acknowledged, and
        the page cache that still shows it may never have reached the disk (the kernel
        marks pages clean after a failed write-back, so recovery's own fsync would
        vouch for them wrongly)."""
        for before in old:
            if not before.fsync_failed or not before.waits_for_fsync:
                continue
            now = self._logs.get((before.topic, before.partition))
            if now is not None and now.log_end_offset > before.recovery_point:
                dropped = now.log_end_offset - before.recovery_point
                now.truncate_to(before.recovery_point)
                logger.warning("%s: dropped %d offsets after its recovery point %d, written before an fsync "
                               "that failed (none was acknowledged)", now.name, dropped, before.recovery_point)

    def probe_offline_dirs(self) -> list[str]:
        """``probe_offline_dir`` for every offline dir; returns those still offline."""
        return [d for d in self.offline_dirs() if not self.probe_offline_dir(d)]

    def _forget_dir_logs(self, log_dir: str) -> None:
        with self._lock:
            for log in self._logs_in(log_dir):
                self._logs.pop((log.topic, log.partition), None)
            self._logs_changes += 1
            self._dir_counts[log_dir] = 0
            self._checkpointed_rows.pop(log_dir, None)
            for name in _CHECKPOINT_FILES:
                self._checkpointed.pop(os.path.join(log_dir, name), None)

    def _live_logs(self) -> list[Log]:
        return [log for log in self._logs.values() if not log.offline]

    # -- background work (blocking; run on a worker thread) ---------------------------------

    def run_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every log; returns the number of segments deleted."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        deleted = 0
        starts_moved = False
        for log in self._live_logs():
            before = log.log_start_offset
            try:
                deleted += log.delete_retained_segments(now)
                log.remove_expired_producers(now, self.producer_id_expiration_ms)
            except OSError as exc:
                self._on_log_io_error(log, exc)
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
        return self.cleaner.clean_logs(self._live_logs(), now_ms)

    def flush_dirty(self, now_ms: int | None = None) -> int:
        """Flushes every log whose flush.ms has passed; returns how many were flushed."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        flushed = 0
        for log in self._logs_flushed_on_time():
            if log.flush_due(now):
                try:
                    log.flush()
                    flushed += 1
                except KafkaError:
                    pass  # the dir went offline, and that was logged
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
        if self._write_per_dir(_CHECKPOINT_FILES):
            self._checkpointed_moves = moves

    def _write_per_dir(self, names: tuple[str, ...]) -> bool:
        """Writes the checkpoints ``names`` in every log dir whose content changed since
        its last write. Each log's three offsets are read once, and a dir whose logs and
        offsets are all as at its last write is passed over whole: an idle broker of
        10,000 partitions rewrites nothing and spends a few ms a pass (building each
        file's mapping every time took 80 ms every 5 s). False when a dir's files could
        not be written (the dir is then full or offline, logged once by that change)."""
        with self._lock:
            entries = list(self._logs.items())
        written = True
        for log_dir, in_dir in self._logs_per_dir(entries).items():
            if self._dir_state.get(log_dir) == OFFLINE:
                continue
            try:
                self._write_dir_checkpoints(log_dir, in_dir, names)
            except OSError as exc:
                self.report_dir_error(log_dir, exc)
                written = False
        return written

    def _write_dir_checkpoints(self, log_dir: str, in_dir: list[tuple[TopicPartition, Log]],
                               names: tuple[str, ...]) -> None:
        keys = [tp for tp, _log in in_dir]
        rows = [log.checkpointed_offsets() for _tp, log in in_dir]
        if self._checkpointed_rows.get(log_dir) == (keys, rows):
            return
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
        self._flush_executor.shutdown(wait=True)
        failed_dirs = set(self.offline_dirs())
        for log in list(self._logs.values()):
            if log.offline:
                log.release_files()
                continue
            try:
                log.close()
            except (KafkaError, OSError) as exc:  # a full or failing dir: no traceback
                logger.warning("Closing log %s failed; its dir will be recovered at the next start: %s",
                               log.name, exc)
                failed_dirs.add(os.path.dirname(log.dir))
            except Exception:
                logger.exception("Closing log %s failed; its dir will be recovered at the "
                                 "next start", log.name)
                failed_dirs.add(os.path.dirname(log.dir))
        self._sweep_deleted_logs(force=True)
        if self._opened:
            self.write_checkpoints(every_log=True)
            for log_dir in self.log_dirs:
                if log_dir not in failed_dirs and self._dir_state[log_dir] != OFFLINE:
                    try:
                        write_clean_shutdown_marker(log_dir)
                    except OSError as exc:
                        logger.warning("Log dir %s: no clean-shutdown marker (%s); it will be recovered "
                                       "at the next start", log_dir, exc)
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
