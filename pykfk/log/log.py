"""One partition's log: ordered segments, append, read, roll, flush, retention, recovery
(apache/kafka ``UnifiedLog`` and ``LocalLog``; on-disk names from ``LogFileUtils``).

Directory ``<topic>-<partition>``::

    00000000000000000000.log          record batches (magic 2), as produced
    00000000000000000000.index        sparse offset index, derived (rebuilt if missing)
    00000000000000000000.timeindex    sparse time index, derived (rebuilt if missing)
    00000000000000000000.txnindex     aborted transactions of the segment, derived
                                      (``pykfk.log.transactions``)
    00000000000000001234.snapshot     producer state as of offset 1234
    *.deleted                         segment files waiting out file.delete.delay.ms
    00000000000000000000.log.cleaned  a segment group being rewritten by the log cleaner
    00000000000000000000.log.swap     a cleaned segment being swapped in (finished on open)

Threads: ``append``, ``read`` and ``roll`` run on the event loop thread; ``flush``,
``delete_retained_segments`` and ``sweep_deleted_segments`` do disk work and belong on a
worker thread (the LogManager runs them in its executor). A lock serialises changes to
the segment list; readers never take it: they work on an immutable snapshot of the list,
and a removed segment's file descriptor stays open for ``file_delete_delay_ms`` so a
region handed to sendfile remains readable.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import contextlib
import dataclasses
import logging
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Collection
from operator import attrgetter
from typing import Any, Protocol

from pykfk._core import records as core_records
from pykfk._core.append_path import LogState
from pykfk._core.fetch_path import read_log
from pykfk._core.regions import FileRegion
from pykfk._core.segment import Segment
from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log.checkpoints import fsync_dir, write_atomic
from pykfk.log.config import NEVER, LogConfig
from pykfk.log.producer_state import (
    ProducerStateManager,
    SnapshotError,
    list_snapshots,
    snapshot_path,
)
from pykfk.log.retention import deletable_segments
from pykfk.log.transactions import (
    ABORT,
    TXN_INDEX_SUFFIX,
    AbortedTransactions,
    AbortedTxn,
    control_marker_records,
    marker_batch,
    read_marker,
)
from pykfk.log.validation import (
    check_client_batches,
    check_keys,
    check_timestamps,
    client_records,
    needs_recompression,
    recompress,
    transactional_producer,
)
from pykfk.metrics.stats import FlushStats

logger = logging.getLogger("pykfk.log")

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
DELETE_DIR_SUFFIX = "-delete"
SWAP_SUFFIX = ".swap"
SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

# ListOffsets special timestamps (Kafka ListOffsetsRequest): the log end (or the limit
# a lookup is given), the log start, the record with the largest timestamp (KIP-734,
# v7+), the first local offset (KIP-405, v8+: every segment is local here, so the log
# start) and the last offset in tiered storage (KIP-1005, v9+: none here, so -1).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

# Index entries store offsets relative to the segment base as int32.
INT32_MAX = 2**31 - 1
# Size of the fixed magic-2 batch header (see src/_core/batch.h).
BATCH_HEADER_SIZE = core_records.BATCH_HEADER_SIZE  # the v2 batch header (src/_core/batch.h)
# Producer snapshots kept per log; older ones are deleted when a new one is written.
SNAPSHOTS_TO_KEEP = 2
# Without a snapshot, producer state is rebuilt from this many trailing segments.
SEGMENTS_TO_SCAN_FOR_PRODUCERS = 2
# Recovery logs one line per segment; past this many bytes also progress inside segments.
RECOVERY_PROGRESS_BYTES = 64 * 1024 * 1024

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def time_ms() -> int:
    """The system clock's wall-clock milliseconds (for callers without a log at hand;
    a log reads its own ``clock``)."""
    return SYSTEM_CLOCK.time_ms()


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_partition_dir(name: str) -> tuple[str, int]:
    """``my-topic-3`` -> ("my-topic", 3); ValueError when the name is not of that form."""
    match = _PARTITION_DIR.match(name)
    if not match:
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return match.group(1), int(match.group(2))


class _NewSegments:
    """New segments whose index files a worker makes, not the append of their first
    index entry (a new file is the costly part of that entry on a busy disk). One task
    drains them all, so a creation of thousands of partitions schedules one, not one a
    partition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, list[Segment]] = {}   # id(scheduler) -> segments

    def add(self, seg: Segment, scheduler: Scheduler) -> None:
        with self._lock:
            pending = self._pending.setdefault(id(scheduler), [])
            pending.append(seg)
            if len(pending) > 1:
                return   # a drain is scheduled already
        # At once (inline before the loop runs): delayed work waits for a loop.
        scheduler.schedule(0, lambda: self._drain(id(scheduler)))

    def _drain(self, key: int) -> None:
        with self._lock:
            segments = self._pending.pop(key, [])
        for seg in segments:
            seg.create_index_files()


class Scheduler(Protocol):
    """Runs disk work off the event loop. ``schedule`` may be called from any thread;
    ``fn`` runs on a worker thread after ``delay_ms``."""

    def schedule(self, delay_ms: int, fn: Callable[[], Any]) -> None: ...


_NEW_SEGMENTS = _NewSegments()

# Per-batch fields read in one C-level pass (map) instead of a Python loop per batch.
_PRODUCER_ID = attrgetter("producer_id")
_MAX_TIMESTAMP = attrgetter("max_timestamp")
_ATTR_CONTROL = core_records.ATTR_CONTROL
_RECORDS_COUNT = attrgetter("records_count")


class Count:
    """A count kept in an instance: incrementing a class attribute would change the class
    and undo the interpreter's attribute caches for every Log on the append path."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


# Configs set on any log of the process (lets the log manager cache which logs have a
# flush.ms). Counted under a lock: logs are made on worker threads too.
CONFIG_CHANGES = Count()
_CONFIG_CHANGES_LOCK = threading.Lock()
# Moves of any log's recovery point, log start offset, log end offset or high watermark
# in the process, counted after each move: the log manager passes over its checkpoints
# while the count stays where it was (an idle broker of 10,000 partitions then reads
# none of them). Unlocked: the interpreter does not switch threads inside an increment,
# and a move is counted after it is made, so a pass that reads the count sees the move.
OFFSET_MOVES = Count()


def _has_producers(headers: list[Any]) -> bool:
    """Kafka keeps producer state only for batches that carry a producer id."""
    if len(headers) == 1:
        return bool(headers[0].producer_id >= 0)
    return bool(max(map(_PRODUCER_ID, headers)) >= 0)


class AppendInfo:
    """What an append did. For a duplicate batch (an idempotent producer's retry) the
    offsets are those of the original write and nothing was appended.

    ``headers`` has a BatchHeader per appended batch, with its final offsets (the
    core's validate-and-assign step made them); ``record_count`` is summed on first use."""

    __slots__ = ("_headers", "_record_count", "duplicate", "first_offset",
                 "flushed", "last_offset", "log_append_time_ms", "log_start_offset")

    def __init__(self, first_offset: int, last_offset: int, log_append_time_ms: int,
                 log_start_offset: int, record_count: int | None, headers: list[Any],
                 duplicate: bool = False):
        """``record_count`` None: the sum over ``headers``."""
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_append_time_ms = log_append_time_ms  # -1 unless LogAppendTime
        self.log_start_offset = log_start_offset
        self.duplicate = duplicate
        self._record_count = record_count
        self._headers = headers
        # Set when the log's flush policy asked for an fsync of this append: done once
        # the fsync succeeded, failed (KafkaError) when it did not.
        self.flushed: concurrent.futures.Future[None] | None = None

    @property
    def record_count(self) -> int:
        if self._record_count is None:
            self._record_count = sum(map(_RECORDS_COUNT, self._headers))
        return self._record_count

    @property
    def headers(self) -> list[Any]:
        """The appended batches' headers, with their final offsets and leader epoch."""
        return self._headers

    def __repr__(self) -> str:
        return (f"AppendInfo(first_offset={self.first_offset}, last_offset={self.last_offset}, "
                f"log_append_time_ms={self.log_append_time_ms}, "
                f"log_start_offset={self.log_start_offset}, record_count={self.record_count}, "
                f"duplicate={self.duplicate})")


class FetchData:
    """Answer of ``Log.read``: the record bytes as a file region (None when there is
    nothing to return) and the offsets a Fetch response reports. Treated as immutable
    (a plain class with slots: one is made per partition a Fetch reads)."""

    __slots__ = ("file_region", "high_watermark", "log_end_offset", "log_start_offset")

    def __init__(self, file_region: FileRegion | None, log_start_offset: int, log_end_offset: int,
                 high_watermark: int):
        self.file_region = file_region
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark

    def __repr__(self) -> str:
        return (f"FetchData(file_region={self.file_region!r}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, high_watermark={self.high_watermark})")


@dataclasses.dataclass(slots=True)
class _PendingDelete:
    deadline_ms: int
    segment: Segment
    paths: list[str]


class _View:
    """Immutable snapshot of the segment list, swapped whole so readers never lock. The
    compiled read (``pykfk._core.fetch_path.read_log``) reads and sets its slots."""

    __slots__ = ("base_offsets", "fetch_hint", "segments")

    def __init__(self, segments: list[Segment]):
        self.segments = segments
        self.base_offsets = [s.base_offset for s in segments]
        # Where the last read ended, for a tailing reader's next fetch: (segment, offset,
        # position), the batch holding ``offset`` starting at ``position`` of ``segment``.
        # Held by the view, so every change of the segment list (roll, truncation,
        # deletion, compaction) drops it with the view it belongs to.
        self.fetch_hint: tuple[Segment, int, int] | None = None


class Log(LogState):
    """The log of one partition in directory ``dir`` (named ``<topic>-<partition>``).

    Opening loads every segment; unless ``clean_shutdown`` is set, segments past
    ``recovery_point`` are checked batch by batch and a torn tail is truncated. Indexes
    that are missing or inconsistent are rebuilt either way. ``log_start_offset`` comes
    from the log-start-offset checkpoint (the first segment's base when higher). ``new``:
    a partition just created, whose directory does not exist yet (one mkdir and one file,
    nothing to load; an existing directory is loaded as usual).

    The offsets, the segment list and the settings an append reads are fields of its
    compiled base (``pykfk._core.append_path.LogState``), which the Produce handler's
    compiled lane reads and moves directly: one state, two writers under one lock.
    """

    # Fields of LogState (C fields the Produce handler's compiled lane reads and moves
    # too), typed here for the Python code: the segment list snapshot and the producer state.
    _view: _View
    producer_state: ProducerStateManager

    # Decompress compressed batches on leader appends to check their records (Kafka does).
    validate_compressed = True
    # Where flushes report their time (the log manager's, for the broker metrics).
    flush_stats: FlushStats | None = None
    # Told of every I/O error of the log's files (the log manager's, which takes the
    # dir offline or marks it full): called with the log and the error, on any thread.
    io_error_handler: Callable[[Log, OSError], None] | None = None

    def __init__(
        self,
        dir: str,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        scheduler: Scheduler | None = None,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        new: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.dir = os.path.abspath(dir)
        # Every read of time (segment ages, flush.ms, LogAppendTime, retention, delete
        # delays) goes through it; a test gives a ManualClock.
        self.clock = clock
        self.topic, self.partition = parse_partition_dir(os.path.basename(self.dir))
        self.config = config
        self.scheduler = scheduler
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._closed = False
        # Appends are accepted: the log is open and its dir neither offline nor full.
        self._writable = True
        self._refusal: str | None = None  # why appends are refused (a dir state)
        # An fsync failed: what follows the recovery point may be lost whatever the page
        # cache shows (see ``flush``).
        self.fsync_failed = False
        self._flush_waiting: concurrent.futures.Future[None] | None = None
        self._view = _View([])
        self._created_ms: dict[int, int] = {}
        self._pending_deletes: list[_PendingDelete] = []
        self._log_start_offset = max(0, log_start_offset)
        self._log_end_offset = 0
        self._recovery_point = max(0, recovery_point)
        self._high_watermark: int | None = None
        self._last_flush_ms = self.clock.time_ms()
        self.producer_state = ProducerStateManager()
        self.aborted_txns = AbortedTransactions(self.dir)
        if not (new and self._start_new()):
            self._load(clean_shutdown)

    def __repr__(self) -> str:
        return (f"Log({self.name}, log_start_offset={self._log_start_offset}, "
                f"log_end_offset={self._log_end_offset}, segments={len(self._view.segments)})")

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _prefix(self) -> str:
        return f"[Log partition={self.name}, dir={os.path.dirname(self.dir)}]"

    # -- offsets ---------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Offsets below this are flushed to disk (recovery starts here after a crash)."""
        return self._recovery_point

    def checkpointed_offsets(self) -> tuple[int, int, int]:
        """(recovery point, log start offset, high watermark): what the log manager's
        checkpoint files keep, read in one call for thousands of logs every few seconds."""
        hw = self._high_watermark
        return self._recovery_point, self._log_start_offset, self._log_end_offset if hw is None else hw

    @property
    def high_watermark(self) -> int:
        """The offset up to which consumers may read. Follows the log end offset until set
        (a standalone broker); set it to None to follow the log end offset again."""
        return self._log_end_offset if self._high_watermark is None else self._high_watermark

    @high_watermark.setter
    def high_watermark(self, value: int | None) -> None:
        if value is None:
            self._high_watermark = None
        else:
            self._high_watermark = min(max(value, self._log_start_offset), self._log_end_offset)
        OFFSET_MOVES.count += 1
        if self.producer_state.unreplicated:  # (rare: a marker the last value was not past)
            with self._lock:
                self._settle_transactions(self.producer_state)

    def _settle_transactions(self, state: ProducerStateManager) -> None:
        """Ended transactions whose marker is below the high watermark stop holding the
        last stable offset (all of them when the high watermark follows the log end)."""
        if self._high_watermark is None:
            state.unreplicated.clear()
        else:
            state.on_high_watermark_updated(self._high_watermark)

    @property
    def last_stable_offset(self) -> int:
        """The offset up to which read_committed consumers may read: the first offset of
        the earliest transaction that is open or whose marker the high watermark has not
        passed yet (a leader that dies before its followers have the marker hands over a
        log where the transaction is open: the last stable offset must not have moved past
        its start), else the high watermark. The Fetch and ListOffsets answers and the log
        cleaner all stop here."""
        state = self.producer_state
        if not state.ongoing and not state.unreplicated:  # (the common case, per fetch)
            return self._log_end_offset if self._high_watermark is None else self._high_watermark
        high_watermark = self._high_watermark
        if high_watermark is None:
            # The high watermark follows the log end: every marker is below it (ended
            # transactions a load found wait for the first high watermark set).
            high_watermark = self._log_end_offset
            first = state.first_ongoing_offset()
        else:
            first = state.first_unstable_offset()
        return high_watermark if first is None or first > high_watermark else first

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions a read of [start, end) may return data of."""
        if not len(self.aborted_txns):
            return []
        return self.aborted_txns.in_range(start, end)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._view.segments)

    @property
    def segments(self) -> list[Segment]:
        """The live segments, oldest first (a copy)."""
        return list(self._view.segments)

    @property
    def active_segment(self) -> Segment:
        return self._view.segments[-1]

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    def flush_due(self, now_ms: int | None = None) -> bool:
        """True when flush.ms has passed since the last flush and data is unflushed."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        return (self.unflushed_messages > 0
                and now - self._last_flush_ms >= self.config.flush_interval_ms)

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        # LogConfig is frozen: the flags every append asks for are read once here.
        self._config = config
        self._compacts = config.compacts
        self._log_append_time = config.log_append_time
        self._timestamp_window = config.timestamp_window
        self._stored_codec = config.stored_codec
        # Whether the log manager's flush scheduler need ask this log (flush.ms set).
        self.flushes_on_time = config.flush_interval_ms < NEVER
        # An append changed by none of these may take the Produce handler's compiled lane
        # (pykfk._core.append_path), which writes the segment and moves the log end offset.
        self._plain_appends = not (config.compacts or config.log_append_time or self.flushes_on_time
                                   or config.timestamp_window is not None or config.stored_codec is not None)
        # What that lane reads of the settings (C fields of LogState): a segment.jitter.ms
        # leaves every append to a non-empty segment to Log._roll_reason (a bound no wait
        # is within).
        self._flush_messages = min(config.flush_interval_messages, NEVER)
        self._segment_bytes = config.segment_bytes
        self._max_segment_ms = -(2**62) if config.segment_jitter_ms else min(config.max_segment_ms, NEVER)
        self._max_message_bytes = config.max_message_bytes
        with _CONFIG_CHANGES_LOCK:
            CONFIG_CHANGES.count += 1

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from the next append (index sizes from the next segment)."""
        self.config = config

    # -- loading and recovery ----------------------------------------------------------

    def _start_new(self) -> bool:
        """A new partition: creates its directory and first segment, with nothing to load
        or recover. False when the directory already exists (then it is loaded)."""
        try:
            os.mkdir(self.dir)
        except FileExistsError:
            return False
        self._view = _View([self._open_segment(self._log_start_offset, new_dir=True)])
        self._log_end_offset = self._recovery_point = self._log_start_offset
        return True

    def _load(self, clean_shutdown: bool) -> None:
        os.makedirs(self.dir, exist_ok=True)
        segments = [self._open_segment(base) for base in self._clean_directory()]
        if clean_shutdown:
            recovered: set[int] = set()
        else:
            segments, recovered = self._recover(segments)
        for seg in segments:
            if seg.indexes_rebuilt:
                logger.warning("%s Rebuilt the indexes of segment %d: %s", self._prefix(),
                               seg.base_offset, seg.index_rebuild_reason)
            if seg.base_offset in recovered:
                continue
            if seg.needs_recovery:
                # A torn tail below the recovery point (a stale checkpoint or a clean-shutdown
                # marker that lied): the segment serves only its whole batches until checked.
                truncated = seg.recover()
                logger.warning("%s Segment %d ended in a damaged batch; truncated %d bytes",
                               self._prefix(), seg.base_offset, truncated)
            elif not seg.sanity_check():
                logger.warning("%s Rebuilding the inconsistent indexes of segment %d",
                               self._prefix(), seg.base_offset)
                seg.rebuild_indexes()
        if not segments:
            segments.append(self._open_segment(self._log_start_offset))
        self._view = _View(segments)
        self._seal_inactive()
        self._log_end_offset = segments[-1].next_offset
        self._log_start_offset = min(max(self._log_start_offset, segments[0].base_offset),
                                     self._log_end_offset)
        # Everything below the log end offset is now either flushed (clean shutdown) or
        # checked and flushed by recovery.
        self._recovery_point = self._log_end_offset
        self.aborted_txns.load(self._view.base_offsets, self._log_end_offset)
        self._load_producer_state()
        logger.info("%s Loaded log with %d segments, log start offset %d, log end offset %d",
                    self._prefix(), len(segments), self._log_start_offset, self._log_end_offset)

    def _clean_directory(self) -> list[int]:
        """Removes leftovers of interrupted deletes and writes, finishes interrupted
        segment swaps; returns the base offsets of the segments present, ascending."""
        self._finish_swaps()
        logs, indexes = set(), []
        for name in os.listdir(self.dir):
            path = os.path.join(self.dir, name)
            if name.endswith((DELETED_SUFFIX, ".tmp", SWAP_SUFFIX, ".cleaned")):
                logger.info("%s Removing leftover file %s", self._prefix(), name)
                os.unlink(path)
                continue
            match = _SEGMENT_FILE.match(name)
            if not match:
                continue
            if match.group(2) == "log":
                logs.add(int(match.group(1)))
            else:
                indexes.append((int(match.group(1)), path))
        for base, path in indexes:
            if base not in logs:
                logger.info("%s Removing index %s without a log file", self._prefix(),
                            os.path.basename(path))
                os.unlink(path)
        return sorted(logs)

    def _finish_swaps(self) -> None:
        """A ``<base>.log.swap`` is a whole cleaned segment (fsynced before the rename) that
        replaces the segments of its offset range (Kafka's LogLoader): it becomes
        ``<base>.log``, and the old segments it covers that were not yet renamed to
        ``.deleted`` go. A ``.cleaned`` file is an unfinished cleaning: removed by the
        caller, the old segments are intact."""
        swaps = sorted(int(name[:20]) for name in os.listdir(self.dir)
                       if name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and _SEGMENT_FILE.match(name[:-5]))
        for base in swaps:
            log_path = self._file(base, LOG_SUFFIX)
            os.replace(log_path + SWAP_SUFFIX, log_path)
            for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # derived from the old data
                try:
                    os.unlink(self._file(base, suffix))
                except FileNotFoundError:
                    pass
            with Segment(self.dir, base, index_interval_bytes=self.config.index_interval_bytes,
                         max_index_bytes=self.config.max_index_bytes) as swapped:
                end = swapped.next_offset
            for name in os.listdir(self.dir):
                match = _SEGMENT_FILE.match(name)
                if match and base < int(match.group(1)) < end:
                    os.unlink(os.path.join(self.dir, name))
            logger.info("%s Finished an interrupted swap of cleaned segment %d (offsets %d-%d)",
                        self._prefix(), base, base, end - 1)

    def _recover(self, segments: list[Segment]) -> tuple[list[Segment], set[int]]:
        """Checks every segment holding offsets at or past the recovery point; truncates
        at the first bad byte and drops the segments after a truncated one."""
        start = 0
        while start < len(segments) - 1 and segments[start + 1].base_offset <= self._recovery_point:
            start += 1
        todo = segments[start:]
        total = sum(s.size for s in todo)
        if not todo:
            return segments, set()
        logger.info("%s Recovering %d unflushed segments (%d bytes) from recovery point %d",
                    self._prefix(), len(todo), total, self._recovery_point)
        done_bytes = 0
        recovered = set()
        for i, seg in enumerate(todo):
            size = seg.size
            truncated = seg.recover(progress=self._recovery_progress(done_bytes, total),
                                    progress_interval=max(size // 10, 1))
            recovered.add(seg.base_offset)
            done_bytes += size
            logger.info("%s Recovered segment %d (%d/%d segments, %d%% of %d bytes)",
                        self._prefix(), seg.base_offset, i + 1, len(todo),
                        done_bytes * 100 // max(total, 1), total)
            if truncated:
                logger.warning("%s Truncated %d bytes of a torn or corrupt tail in segment %d; "
                               "log end offset now %d", self._prefix(), truncated,
                               seg.base_offset, seg.next_offset)
                seg.flush()
                dropped = todo[i + 1:]
                for later in dropped:
                    logger.warning("%s Deleting segment %d, which follows the truncated one",
                                   self._prefix(), later.base_offset)
                    later.delete()
                return segments[:start + i + 1], recovered
        for seg in todo:
            seg.flush()
        return segments, recovered

    def _recovery_progress(self, done_before: int, total: int) -> Callable[[int, int], None] | None:
        """Progress lines inside a segment, only for logs large enough to take a while."""
        if total < RECOVERY_PROGRESS_BYTES:
            return None

        def progress(position: int, segment_size: int) -> None:
            if position < segment_size:
                logger.info("%s Recovery %d%% done", self._prefix(),
                            (done_before + position) * 100 // total)
        return progress

    # -- segments ------------------------------------------------------------------------

    def _file(self, base_offset: int, suffix: str) -> str:
        return os.path.join(self.dir, segment_file_name(base_offset, suffix))

    def _open_segment(self, base_offset: int, now_ms: int | None = None, *, new_dir: bool = False) -> Segment:
        seg = Segment(self.dir, base_offset,
                      index_interval_bytes=self.config.index_interval_bytes,
                      max_index_bytes=self.config.max_index_bytes,
                      preallocate=self.config.preallocate, new=new_dir)
        self._created_ms[base_offset] = self.clock.time_ms() if now_ms is None else now_ms
        if seg.size == 0 and self.scheduler is not None:
            _NEW_SEGMENTS.add(seg, self.scheduler)
        return seg

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self._refusal or f"log {self.name} is closed")
        if self._refusal is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, self._refusal)

    def _set_closed(self) -> None:
        self._closed = True
        self._writable = False

    def refuse_appends(self, reason: str | None) -> None:
        """Appends answer KAFKA_STORAGE_ERROR with ``reason`` (its log dir is full or
        below its free-space floor) until called with None. Reads go on."""
        self._refusal = reason
        self._writable = reason is None and not self._closed

    def go_offline(self, reason: str) -> None:
        """Its log dir failed: the log takes no append and no flush any more (a later
        fsync's success would say nothing of data an earlier one failed to write), and
        waits to be loaded again (with recovery) from its files."""
        with self._lock:
            self._refusal = reason
            self._set_closed()
            waiting, self._flush_waiting = self._flush_waiting, None
        if waiting is not None:
            waiting.set_exception(KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, reason))

    @property
    def waits_for_fsync(self) -> bool:
        """Appends are answered after their fsync (flush.messages or flush.ms set)."""
        return self._config.flush_interval_messages < NEVER or self.flushes_on_time

    @property
    def offline(self) -> bool:
        return self._closed and self._refusal is not None

    def release_files(self) -> None:
        """Closes the segments of a log taken offline (their regions may fail now)."""
        for seg in self._view.segments:
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                seg.close()

    def _io_failed(self, exc: OSError, what: str) -> KafkaError:
        """Reports an I/O error of this log's files to its handler and gives the error
        its request is answered with."""
        if self.io_error_handler is None:
            logger.error("%s %s failed: %s", self._prefix(), what, exc)
        else:  # logged there, once per change of the dir's state
            self.io_error_handler(self, exc)
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{what} of {self.name} failed: {exc}")

    def roll(self, base_offset: int | None = None, *, now_ms: int | None = None,
             reason: str = "requested") -> Segment:
        """Starts a new active segment at the log end offset (or ``base_offset`` when
        larger, for follower appends that skip offsets). No-op while the active segment
        is empty. The previous segment is flushed in the background."""
        with self._lock:
            self._check_open()
            active = self._view.segments[-1]
            if active.size == 0:
                return active
            start = self.clock.monotonic()
            new_base = max(self._log_end_offset, base_offset or 0)
            try:
                self._take_producer_snapshot(new_base)
                seg = self._open_segment(new_base, now_ms)
            except OSError as exc:
                raise self._io_failed(exc, f"Rolling a segment at offset {new_base}") from None
            self._view = _View(self._view.segments + [seg])
            self._log_end_offset = new_base
            OFFSET_MOVES.count += 1
            self._seal(active)
            logger.info("%s Rolled new log segment at offset %d (%s) in %.1f ms",
                        self._prefix(), new_base, reason, (self.clock.monotonic() - start) * 1000)
        # Kafka flushes the finished segment right after a roll, off the append path, so
        # the recovery point moves forward segment by segment.
        if self.scheduler is not None:
            self.scheduler.schedule(0, lambda: self.flush(new_base))
        return seg

    def _roll_reason(self, seg: Segment, size: int, headers: list[Any], log_append_time: bool,
                     last_offset: int, now_ms: int | None) -> str | None:
        """Why the append must roll first, or None. ``now_ms`` None: the clock is read
        only if the decision needs it (a producer's timestamps usually decide)."""
        seg_size = seg.size
        if seg_size == 0:
            return None
        config = self._config
        if seg_size > config.segment_bytes - size:
            return "segment.bytes"
        first_ts = seg.first_batch_timestamp
        # Kafka's timeWaitedForRoll: by the batches' largest timestamp when the segment has
        # one, else by the segment's age. The largest timestamp costs a pass over the
        # headers, so it is taken only when it decides.
        max_timestamp = -1
        if first_ts >= 0:
            if log_append_time:
                max_timestamp = self.clock.time_ms() if now_ms is None else now_ms
            elif len(headers) == 1:
                max_timestamp = headers[0].max_timestamp
            else:
                max_timestamp = max(map(_MAX_TIMESTAMP, headers))
        if max_timestamp >= 0:
            waited = max_timestamp - first_ts
        else:
            if now_ms is None:
                now_ms = self.clock.time_ms()
            waited = now_ms - self._created_ms.get(seg.base_offset, now_ms)
        if waited > config.max_segment_ms - (self._roll_jitter_ms(seg) if config.segment_jitter_ms else 0):
            return "segment.ms" if waited > config.segment_ms else "max.compaction.lag.ms"
        if seg.is_index_full():
            return "index full"
        if last_offset - seg.base_offset > INT32_MAX:
            return "relative offset overflow"
        return None

    def _roll_jitter_ms(self, seg: Segment) -> int:
        """Kafka's rollJitterMs: a share of segment.jitter.ms (below segment.ms), fixed
        per segment, so partitions created together do not all roll at once."""
        bound = min(self._config.segment_jitter_ms, self._config.segment_ms)
        return hash((self.dir, seg.base_offset)) % bound if bound > 0 else 0

    # -- append ----------------------------------------------------------------------------

    def append(self, records: Any, *, leader_epoch: int = -1, assign_offsets: bool = True,
               now_ms: int | None = None, require_single_batch: bool = False,
               from_client: bool = False) -> AppendInfo:
        """Appends whole magic-2 batches (a Produce payload; legacy magic 0/1 message sets
        are converted first).

        With ``assign_offsets`` (a leader) one pass of the core validates the batches the
        way Kafka's LogValidator does and writes offsets from the log end offset and
        ``leader_epoch`` into them in place (LogAppendTime and its CRC too, for topics
        that use it), and idempotent producers are checked; the segment write is the
        second and last time the bytes are touched. ``from_client``: the data came from
        a producer, and the client rules of ``pykfk.log.validation`` apply (no control
        batches, no producer batch without sequence numbers, no empty data).
        ``require_single_batch`` (Produce v3+) refuses anything but one magic-2 batch.
        Without ``assign_offsets`` (a follower) the batches keep their offsets, which
        must start at or after the log end offset and increase. Raises pykfk._core
        errors for bad bytes (CorruptBatchError, InvalidRecordError, RecordTooLargeError)
        and KafkaError for rule and producer-state violations and RECORD_LIST_TOO_LARGE
        (``validation.InvalidRecords`` when single records break a rule).
        """
        if from_client:
            buf = client_records(records, require_single_batch)
        else:
            buf = records if type(records) is memoryview else memoryview(records)
            if not assign_offsets:
                return self._append_as_follower(buf, now_ms)
            if len(buf) > 16 and core_records.is_legacy(buf):
                buf = memoryview(core_records.convert_legacy(buf))
            elif buf.readonly:
                buf = memoryview(bytearray(buf))  # offsets are written in place
        config = self._config
        log_append_time = self._log_append_time
        # The clock only when the batches get it; a roll decision reads it if it needs it.
        now = self.clock.time_ms() if now_ms is None and log_append_time else now_ms
        with self._lock:
            if not self._writable:
                self._check_open()
            first_offset = self._log_end_offset
            headers = core_records.validate_and_assign(
                buf, first_offset, leader_epoch, config.max_message_bytes,
                decompress=self.validate_compressed,
                log_append_time_ms=now if log_append_time and now is not None else -1,
                max_batches=1 if require_single_batch else 0)
            if not headers:
                return AppendInfo(-1, -1, -1, self._log_start_offset, 0, [])
            if len(headers) == 1:  # one batch (Produce v3+): its fields read once
                header = headers[0]
                producer_id = header.producer_id
                # The client rules' batch checks, inline.
                if from_client and (header.attributes & _ATTR_CONTROL or (header.base_sequence < 0 <= producer_id)):
                    check_client_batches(headers)  # raises, with the rule broken
                has_producers = producer_id >= 0
            else:
                if from_client:
                    check_client_batches(headers)
                has_producers = _has_producers(headers)
            if self._timestamp_window is not None:
                check_timestamps(buf, headers, self._timestamp_window, self.clock.time_ms() if now is None else now)
            if self._stored_codec is not None and needs_recompression(headers, self._stored_codec):
                buf = memoryview(recompress(buf, headers, self._stored_codec, config.compression_level))
                headers = core_records.validate_and_assign(
                    buf, first_offset, leader_epoch, config.max_message_bytes, decompress=False,
                    log_append_time_ms=now if log_append_time and now is not None else -1)
            if self._compacts:
                check_keys(buf)
            if len(buf) > config.segment_bytes:
                self._check_size(len(buf))
            producers = self.producer_state.prepare_append(headers, check=True) if has_producers else None
            if producers is not None and producers.duplicate is not None:
                duplicate = producers.duplicate
                if logger.isEnabledFor(logging.DEBUG):
                    logger.debug("%s Duplicate batch of an idempotent producer, offsets %d-%d",
                                 self._prefix(), duplicate.first_offset, duplicate.last_offset)
                return AppendInfo(duplicate.first_offset, duplicate.last_offset, -1,
                                  self._log_start_offset, 0, [], duplicate=True)
            info, flush_now = self._write_locked(buf, headers, first_offset, producers,
                                                 log_append_time, now, leader=True)
        if flush_now:
            self.flush()
        return info

    def _append_as_follower(self, buf: memoryview, now_ms: int | None) -> AppendInfo:
        """Batches fetched from the leader keep their offsets; validated without the
        record walk (the leader checked them)."""
        headers = core_records.validate_batches(buf, self._config.max_message_bytes)
        if not headers:
            return AppendInfo(-1, -1, -1, self._log_start_offset, 0, [])
        self._check_size(len(buf))
        with self._lock:
            if not self._writable:
                self._check_open()
            first_offset = headers[0].base_offset
            if first_offset < self._log_end_offset:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"batch at offset {first_offset} is below the next "
                                 f"expected offset {self._log_end_offset}")
            state = self.producer_state
            producers = state.prepare_append(headers, check=False) if _has_producers(headers) else None
            info, flush_now = self._write_locked(buf, headers, first_offset, producers, False, now_ms,
                                                 leader=False)
            if producers is not None:  # markers carry a producer id too
                for header, kind, coordinator_epoch in control_marker_records(buf, headers):
                    self._complete_txn(state, header, kind == ABORT, coordinator_epoch)
                if state.unreplicated and self._high_watermark is None:
                    state.unreplicated.clear()
        if flush_now:
            self.flush()
        return info

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, *, leader_epoch: int = -1,
                      now_ms: int | None = None) -> AppendInfo:
        """Ends the producer's transaction in this partition with a COMMIT or ABORT
        marker (a leader, on the transaction coordinator's word). The last stable offset
        moves past the transaction once the high watermark passes the marker (at once when
        the high watermark follows the log end); an abort is added to the
        aborted-transactions index.
        Raises KafkaError(INVALID_PRODUCER_EPOCH) for an epoch older than the producer's."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        with self._lock:
            self.producer_state.check_marker(producer_id, producer_epoch)
        batch = bytearray(marker_batch(producer_id, producer_epoch, commit, coordinator_epoch, now))
        info = self.append(batch, leader_epoch=leader_epoch, now_ms=now)
        with self._lock:
            state = self.producer_state
            self._complete_txn(state, info.headers[0], not commit, coordinator_epoch)
            if self._high_watermark is None:
                state.unreplicated.clear()
        return info

    def _complete_txn(self, state: ProducerStateManager, marker: Any, aborted: bool,
                      coordinator_epoch: int) -> None:
        """The marker ``marker`` (its batch header, final offsets; written by the
        transaction coordinator of ``coordinator_epoch``) ends a transaction in ``state``
        (unstable until the high watermark passes the marker); an abort goes into the
        index of the segment holding the marker, with the last stable offset it leaves
        as Kafka records it (the next open transaction's start, else past the marker)."""
        offset = marker.base_offset
        first = state.complete_txn(marker.producer_id, marker.producer_epoch, offset,
                                   marker.max_timestamp, coordinator_epoch)
        if not aborted or first is None:
            return
        unstable = state.first_ongoing_offset()
        view = self._view
        segment_base = view.base_offsets[max(bisect.bisect_right(view.base_offsets, offset) - 1, 0)]
        self.aborted_txns.add(AbortedTxn(marker.producer_id, first, offset,
                                         offset + 1 if unstable is None else unstable), segment_base)

    def _check_size(self, size: int) -> None:
        if size > self._config.segment_bytes:
            raise KafkaError(ErrorCode.RECORD_LIST_TOO_LARGE,
                             f"{size} bytes do not fit in a segment of "
                             f"{self._config.segment_bytes} bytes")

    def _write_locked(self, buf: memoryview, headers: list[Any], first_offset: int, producers: Any,
                      log_append_time: bool, now: int | None, *, leader: bool) -> tuple[AppendInfo, bool]:
        """The segment write and what follows it, under the lock: roll if needed, append,
        move the log end offset, commit producer state, schedule a flush. Returns the
        AppendInfo and whether the caller must flush now (after releasing the lock)."""
        config = self._config
        size = len(buf)
        next_offset = headers[-1].next_offset
        segment = self._view.segments[-1]
        reason = self._roll_reason(segment, size, headers, log_append_time, next_offset - 1, now)
        if reason is None and first_offset - segment.base_offset > INT32_MAX:
            reason = "relative offset overflow"
        if reason is not None:
            if not leader:
                # Segment.append checks the order inside the batches too, but only once
                # the roll is done: check first, so a bad append changes nothing.
                self._check_follower_offsets(headers)
            segment = self.roll(first_offset, now_ms=now, reason=reason)
        try:
            segment.append(buf)  # leaves no partial batch behind when the write fails
        except (OSError, ValueError) as exc:
            self._append_failed(segment, exc, leader)
        self._log_end_offset = next_offset
        OFFSET_MOVES.count += 1
        state = self.producer_state
        if producers is None:
            # commit_append's whole work for an append without producer batches.
            if next_offset > state.map_end_offset:  # noqa: PLR1730 (a max() call costs more)
                state.map_end_offset = next_offset
        else:
            state.commit_append(producers, headers, next_offset, offsets_assigned=False)
        info = AppendInfo(first_offset, next_offset - 1,
                          now if log_append_time and now is not None else -1,
                          self._log_start_offset, next_offset - first_offset if leader else None,
                          headers)
        flush_now = False
        if next_offset - self._recovery_point >= config.flush_interval_messages or (
                self.flushes_on_time and self.flush_due(now)):
            flush_now = self._request_flush()
            info.flushed = self._flush_waiting
        return info, flush_now

    def _append_failed(self, segment: Segment, exc: OSError | ValueError, leader: bool) -> None:
        """Raises what a failed Segment.append means to the caller."""
        if isinstance(exc, OSError):
            raise self._io_failed(exc, f"Append to segment {segment.base_offset}") from None
        if leader:
            raise exc
        # A follower's batches whose offsets do not increase (checked before any write).
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(exc)) from exc

    def _check_follower_offsets(self, headers: list[Any]) -> None:
        expected = self._log_end_offset
        for h in headers:
            if h.base_offset < expected:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                                 f"batch at offset {h.base_offset} is below the next "
                                 f"expected offset {expected}")
            expected = h.last_offset + 1

    def _request_flush(self) -> bool:
        """flush.messages reached: flush on the scheduler, or inline (returns True) when
        the log runs without one. Appends made until that flush starts wait for it
        together (``_flush_waiting``, a future their AppendInfo carries)."""
        if self.scheduler is None:
            return True
        if self._flush_waiting is None:
            self._flush_waiting = concurrent.futures.Future()
            self.scheduler.schedule(0, self._scheduled_flush)
        return False

    def _scheduled_flush(self) -> None:
        with self._lock:
            waiting, self._flush_waiting = self._flush_waiting, None
            up_to = self._log_end_offset
        try:
            self.flush(up_to)
        except KafkaError as exc:  # reported by flush
            if waiting is not None:
                waiting.set_exception(exc)
            return
        if waiting is None:
            return
        if self._recovery_point >= up_to:
            waiting.set_result(None)
        else:  # closed or taken offline before the fsync
            waiting.set_exception(KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                             self._refusal or f"log {self.name} is closed"))

    # -- read ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, *,
             min_one_message: bool = True) -> FetchData:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` (at least
        one batch when ``min_one_message``, Fetch v3+) and below ``max_offset`` (the high
        watermark for consumers). Raises KafkaError(OFFSET_OUT_OF_RANGE) when ``offset`` is
        outside [log_start_offset, log_end_offset]. Never takes the lock.

        The read is compiled (``pykfk._core.fetch_path.read_log``, which the Fetch
        handler calls directly): a tailing reader asking where its last read ended
        (``_View.fetch_hint``) costs no index or header read; a segment closed meanwhile
        (deleted with file.delete.delay.ms 0) makes it read the current list again."""
        found = read_log(self, offset, max_bytes, max_offset, min_one_message)
        if found is None:
            raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is outside "
                             f"[{self._log_start_offset}, {self._log_end_offset}] of {self.name}")
        return FetchData(*found)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """ListOffsets: the first offset of the first batch with a timestamp at or after
        ``timestamp``; -1 (latest) gives the log end offset, -2 (earliest) the log start
        offset; None when no batch is that recent."""
        if timestamp == LATEST_TIMESTAMP:
            return self._log_end_offset
        if timestamp == EARLIEST_TIMESTAMP:
            return self._log_start_offset
        for seg in self._view.segments:
            if seg.max_timestamp >= timestamp:
                offset = seg.offset_for_timestamp(timestamp)
                if offset is not None:
                    return max(offset, self._log_start_offset)
        return None

    def fetch_offset_by_timestamp(self, timestamp: int, limit: int) -> tuple[int, int]:
        """ListOffsets v1+ (Kafka's ``fetchOffsetByTimestamp``): ``(timestamp, offset)`` of
        the first record at or after ``timestamp`` below ``limit`` (the high watermark or
        the last stable offset), that record's own timestamp answered (the time index
        finds its batch, the batch is read); (-1, -1) when no record is that late. The
        special timestamps: latest (-1) gives ``limit``, earliest (-2) and earliest local
        (-4) the log start offset, -3 the record with the largest timestamp, -5 (latest
        tiered) -1. INVALID_REQUEST for another negative value."""
        if timestamp == LATEST_TIMESTAMP:
            return -1, limit
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            return -1, self._log_start_offset
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp_record()
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return -1, -1
        if timestamp < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"unsupported special timestamp {timestamp}")
        found = self.offset_for_timestamp(timestamp)
        if found is None or found >= limit:
            return -1, -1
        return self._first_record_at_or_after(found, timestamp, limit)

    def _max_timestamp_record(self) -> tuple[int, int]:
        """The record with the largest timestamp (the first such one), found through the
        segments' largest timestamps and then inside its batch; (-1, -1) for an empty log."""
        best = None
        for segment in self._view.segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return -1, -1
        offset = best.offset_for_timestamp(best.max_timestamp)
        if offset is None:
            return -1, -1
        return self._first_record_at_or_after(max(offset, self._log_start_offset), best.max_timestamp,
                                              self._log_end_offset)

    def _first_record_at_or_after(self, offset: int, timestamp: int, limit: int) -> tuple[int, int]:
        """The index finds the batch; Kafka answers with the first *record* whose timestamp
        is >= the target, and that record's own timestamp, so look inside the batch."""
        region = self.read(offset, 1, max_offset=limit).file_region
        if region is None or region.size == 0:
            return timestamp, offset
        for record in core_records.iter_records(region.read()):
            if record.offset >= offset and record.timestamp >= timestamp:
                return record.timestamp, record.offset
        return timestamp, offset

    def transaction_to_verify(self, records: Any) -> tuple[int, int] | None:
        """KIP-890 verification of a client's data: ``(producer_id, producer_epoch)`` of a
        transactional batch at the start of ``records`` whose transaction this log does
        not yet hold open at that epoch (the coordinator must confirm the partition was
        added to it); None when there is nothing to ask (not transactional, or checked
        at the transaction's first batch here)."""
        producer = transactional_producer(records)
        if producer is None:
            return None
        state = self.producer_state
        entry = state.producers.get(producer[0])
        if producer[0] in state.ongoing and entry is not None and entry.producer_epoch == producer[1]:
            return None
        return producer

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (the seeds' getOffsetsBefore): up to ``max_num_offsets`` offsets,
        largest first, from the segments' base offsets and the log end offset. Each
        segment counts as of its file's last modification time and the log end as of
        now; ``timestamp`` -1 starts at the log end, -2 at the first segment, another
        value at the last point modified at or before it. At most one offset a segment,
        plus one."""
        with self._lock:
            segments = list(self._view.segments)
            log_start, log_end = self._log_start_offset, self._log_end_offset
        points = [(max(seg.base_offset, log_start), _mtime_ms(seg)) for seg in segments]
        if segments and segments[-1].size > 0:
            points.append((log_end, self.clock.time_ms()))
        if timestamp == LATEST_TIMESTAMP:
            start = len(points) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            start = 0 if points else -1
        else:
            start = len(points) - 1
            while start >= 0 and points[start][1] > timestamp:
                start -= 1
        count = max(0, min(max_num_offsets, start + 1))
        return sorted((points[start - j][0] for j in range(count)), reverse=True)

    # -- flush --------------------------------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsyncs the segments holding offsets from the recovery point up to ``up_to``
        (the log end offset by default) and moves the recovery point there. Blocking:
        call it from a worker thread when an event loop is running."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                end = self._log_end_offset if up_to is None else min(up_to, self._log_end_offset)
                start = self._recovery_point
                view = self._view
            if end > start:
                began = self.clock.monotonic()
                segs = view.segments
                try:
                    for i, seg in enumerate(segs):
                        seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else self._log_end_offset
                        if seg_end > start and seg.base_offset < end:
                            seg.flush()
                except OSError as exc:
                    # The kernel may have dropped the pages it failed to write: nothing
                    # past the recovery point can be trusted to be on disk, and a later
                    # fsync's success would not say otherwise.
                    self.fsync_failed = True
                    self.go_offline(f"fsync of {self.name} failed: {exc}")
                    raise self._io_failed(exc, "fsync") from None
                if self.flush_stats is not None:
                    self.flush_stats.observe(self.clock.monotonic() - began)
            with self._lock:
                self._recovery_point = max(self._recovery_point, min(end, self._log_end_offset))
                OFFSET_MOVES.count += 1
                self._last_flush_ms = self.clock.time_ms()
                self._seal_inactive()

    def _seal_inactive(self) -> None:
        """Seals every segment but the active one (a roll seals the previous one at once
        unless a flush held it; the flush after the roll finishes the job)."""
        for seg in self._view.segments[:-1]:
            if not seg.sealed:
                self._seal(seg)

    def _seal(self, seg: Segment) -> None:
        try:
            seg.seal()
        except RuntimeError:
            pass  # busy in another thread: the next flush seals it
        except OSError as exc:
            logger.warning("%s Could not trim the indexes of segment %d: %s", self._prefix(),
                           seg.base_offset, exc)

    # -- truncation (followers) ---------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Removes every batch at or after ``offset`` (a follower matching its leader).
        Returns the number of segments removed. No-op when offset >= log end offset."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        # Segment.truncate_to refuses to run while the segment is being fsynced.
        with self._flush_lock, self._lock:
            self._check_open()
            if offset >= self._log_end_offset:
                return 0
            view = self._view
            if offset <= view.segments[0].base_offset:
                return self._truncate_fully_locked(offset)
            keep = [s for s in view.segments if s.base_offset < offset]
            dropped = view.segments[len(keep):]
            keep[-1].truncate_to(offset)
            self._view = _View(keep)
            self._log_end_offset = keep[-1].next_offset
            self._after_truncation()
            logger.info("%s Truncated to offset %d, log end offset %d", self._prefix(), offset,
                        self._log_end_offset)
        self._schedule_delete(dropped)
        return len(dropped)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Deletes all data and restarts the log empty at ``offset`` (a follower whose
        leader's log starts past its end)."""
        with self._flush_lock, self._lock:
            self._check_open()
            self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> int:
        dropped = self._view.segments
        self._view = _View([])
        self.aborted_txns.drop_before(offset)
        for base in list_snapshots(self.dir):
            os.unlink(snapshot_path(self.dir, base))
        self._schedule_delete(dropped)
        self._view = _View([self._open_segment(offset)])
        self._log_start_offset = offset
        self._log_end_offset = offset
        self._after_truncation()
        logger.info("%s Truncated fully, log restarts at offset %d", self._prefix(), offset)
        return len(dropped)

    def _after_truncation(self) -> None:
        self._recovery_point = min(self._recovery_point, self._log_end_offset)
        self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
        if self._high_watermark is not None:
            self._high_watermark = min(self._high_watermark, self._log_end_offset)
        OFFSET_MOVES.count += 1
        for base in list_snapshots(self.dir):
            if base > self._log_end_offset:
                os.unlink(snapshot_path(self.dir, base))
        self.aborted_txns.truncate(self._log_end_offset, self._view.base_offsets)
        self._load_producer_state()
        self._settle_transactions(self.producer_state)

    # -- compaction ---------------------------------------------------------------------------

    def replace_segments(self, old: list[Segment], cleaned_path: str, *,
                         removed_aborts: Collection[int] = ()) -> Segment:
        """Swaps in a cleaned copy of the consecutive segments ``old`` (the log cleaner's
        ``<base>.log.cleaned``, fsynced, base = ``old[0].base_offset``), as Kafka's
        replaceSegments: rename to ``.swap``, old files to ``.deleted`` (closed after
        file.delete.delay.ms, so readers' regions stay valid), ``.swap`` to ``.log``.
        A crash at any step leaves files that loading finishes or discards.
        ``removed_aborts``: offsets of ABORT markers the cleaned copy no longer holds; their
        aborted transactions leave the index in the same swap. Raises
        RuntimeError when ``old`` are no longer live consecutive segments of this log
        (truncated or deleted meanwhile); the cleaned file is then left to the caller."""
        base = old[0].base_offset
        log_path = self._file(base, LOG_SUFFIX)
        with self._flush_lock, self._lock:
            self._check_open()
            segments = self._view.segments
            try:
                i = next(k for k, s in enumerate(segments) if s is old[0])
            except StopIteration:
                raise RuntimeError(f"segment {base} is no longer in the log") from None
            if segments[i:i + len(old)] != old or i + len(old) >= len(segments):
                raise RuntimeError(f"segments {[s.base_offset for s in old]} are no longer "
                                   f"consecutive inactive segments of the log")
            os.rename(cleaned_path, log_path + SWAP_SUFFIX)
            self._rename_for_delete(old)
            os.rename(log_path + SWAP_SUFFIX, log_path)
            new = self._open_segment(base)
            self._view = _View(segments[:i] + [new] + segments[i + len(old):])
            self._seal(new)
            self.aborted_txns.remove(removed_aborts)
            self.aborted_txns.rewrite_segment(base, new.next_offset)
        fsync_dir(self.dir)
        if self.scheduler is not None:
            self.scheduler.schedule(self.config.file_delete_delay_ms, self.sweep_deleted_segments)
        return new

    # -- retention and deletion -----------------------------------------------------------

    def delete_retained_segments(self, now_ms: int | None = None) -> int:
        """Deletes the oldest segments that retention.ms, retention.bytes or the log start
        offset allow (never the active one, never data at or past the high watermark) and
        moves the log start offset. Returns the number of segments deleted. Blocking."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return 0
            view = self._view
            count, reason = deletable_segments(
                view.segments, self.config, now_ms=now, high_watermark=self.high_watermark,
                log_start_offset=self._log_start_offset, mtime_ms=_mtime_ms)
            if count:
                doomed, remaining = view.segments[:count], view.segments[count:]
                # Start offset first: a reader that sees the new start with the old list is
                # safe; one that sees the old start with the new list is caught in read().
                self._log_start_offset = max(self._log_start_offset, remaining[0].base_offset)
                self._view = _View(remaining)
                self._recovery_point = max(self._recovery_point, self._log_start_offset)
                OFFSET_MOVES.count += 1
                self.aborted_txns.drop_before(self._log_start_offset)
                logger.info("%s Deleting %d segments (%s), log start offset now %d",
                            self._prefix(), count, reason, self._log_start_offset)
        if count:
            self._schedule_delete(doomed)
        # Delete deadlines are wall-clock times set just now, after ``now`` was read (and
        # ``now_ms`` may be a caller's clock): sweep by the wall clock.
        self.sweep_deleted_segments()
        return count

    def advance_log_start_offset(self, offset: int) -> None:
        """DeleteRecords: offsets below ``offset`` become unreadable; whole segments below
        it go at the next retention pass."""
        with self._lock:
            if offset > self.high_watermark:
                raise KafkaError(ErrorCode.OFFSET_OUT_OF_RANGE,
                                 f"{offset} is past the high watermark of {self.name}")
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                OFFSET_MOVES.count += 1
                logger.info("%s Log start offset advanced to %d", self._prefix(), offset)

    def _schedule_delete(self, segments: list[Segment]) -> None:
        """Renames the files of removed segments to ``*.deleted`` (a restart finishes the
        job) and closes and unlinks them after file.delete.delay.ms, so descriptors handed
        to readers stay valid meanwhile."""
        if not segments:
            return
        self._rename_for_delete(segments)
        if self.scheduler is not None:
            self.scheduler.schedule(self.config.file_delete_delay_ms, self.sweep_deleted_segments)

    def _rename_for_delete(self, segments: list[Segment]) -> None:
        deadline = self.clock.time_ms() + self.config.file_delete_delay_ms
        for seg in segments:
            paths = []
            for suffix in SEGMENT_FILE_SUFFIXES:
                path = self._file(seg.base_offset, suffix)
                try:
                    os.rename(path, path + DELETED_SUFFIX)
                    paths.append(path + DELETED_SUFFIX)
                except FileNotFoundError:
                    pass
            self._created_ms.pop(seg.base_offset, None)
            with self._lock:
                self._pending_deletes.append(_PendingDelete(deadline, seg, paths))

    def sweep_deleted_segments(self, now_ms: int | None = None, *, force: bool = False) -> int:
        """Closes and unlinks removed segments whose delay is over (all with ``force``).
        Returns how many went."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        with self._lock:
            due = [p for p in self._pending_deletes if force or p.deadline_ms <= now]
            if not due:
                return 0
            self._pending_deletes = [p for p in self._pending_deletes if p not in due]
        with self._flush_lock:
            for pending in due:
                try:
                    pending.segment.close()
                except (OSError, ValueError) as exc:
                    logger.warning("%s Closing deleted segment %d: %s", self._prefix(),
                                   pending.segment.base_offset, exc)
                for path in pending.paths:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass
                logger.info("%s Deleted segment files of offset %d", self._prefix(),
                            pending.segment.base_offset)
        return len(due)

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_deletes)

    # -- producer state ------------------------------------------------------------------------

    def _take_producer_snapshot(self, offset: int, *, sync: bool = False) -> None:
        write_atomic(snapshot_path(self.dir, offset), self.producer_state.snapshot_bytes(),
                     sync=sync)
        for old in list_snapshots(self.dir)[:-SNAPSHOTS_TO_KEEP]:
            try:
                os.unlink(snapshot_path(self.dir, old))
            except FileNotFoundError:
                pass

    def _load_producer_state(self) -> None:
        """Latest usable snapshot at or below the log end offset, then the batch headers
        after it; without a snapshot, the headers of the last segments. Transactions
        whose markers the replay finds stay unstable until a high watermark past them is
        set (Kafka's load: the replica manager sets the checkpointed one next)."""
        state = ProducerStateManager()
        start = None
        for offset in reversed(list_snapshots(self.dir)):
            path = snapshot_path(self.dir, offset)
            if offset > self._log_end_offset:
                os.unlink(path)
                continue
            try:
                with open(path, "rb") as f:
                    state.load_snapshot_bytes(f.read(), offset)
                start = offset
                break
            except (OSError, SnapshotError) as exc:
                logger.warning("%s Ignoring producer snapshot %s: %s", self._prefix(),
                               os.path.basename(path), exc)
                os.unlink(path)
        segments = self._view.segments
        if start is None:
            start = segments[max(0, len(segments) - SEGMENTS_TO_SCAN_FOR_PRODUCERS)].base_offset
        scanned = self._replay_producer_batches(state, start)
        self.producer_state = state
        if scanned or state.producers:
            logger.info("%s Loaded producer state of %d producers (%d batches replayed from "
                        "offset %d)", self._prefix(), len(state.producers), scanned, start)

    def _replay_producer_batches(self, state: ProducerStateManager, start: int) -> int:
        count = 0
        for seg in self._view.segments:
            if seg.next_offset <= start:
                continue
            fd, size = seg.pin(), seg.size
            try:
                count += self._replay_segment(state, seg, fd, size, start)
            finally:
                seg.unpin()
        state.map_end_offset = max(state.map_end_offset, self._log_end_offset)
        return count

    def _replay_segment(self, state: ProducerStateManager, seg: Segment, fd: int, size: int,
                        start: int) -> int:
        count = 0
        position = seg.position_of(start) if start > seg.base_offset else 0
        while position + BATCH_HEADER_SIZE <= size:
            raw = os.pread(fd, BATCH_HEADER_SIZE, position)
            try:
                header = core_records.parse_batch_header(raw)
            except ValueError as exc:
                logger.warning("%s Stopped replaying producer state in segment %d at "
                               "byte %d: %s", self._prefix(), seg.base_offset, position, exc)
                break
            if header.last_offset >= start:
                state.commit_append(state.prepare_append((header,), check=False),
                                    (header,), header.next_offset, offsets_assigned=False)
                if header.is_control and header.producer_id >= 0:
                    found = read_marker(os.pread(fd, header.size, position))
                    if found is not None:
                        self._complete_txn(state, header, found[0] == ABORT, found[1])
                count += 1
            position += header.size
        return count

    def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        with self._lock:
            return self.producer_state.remove_expired(now_ms, expiration_ms)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Flushes, writes a producer snapshot at the log end offset and closes every
        segment (also those waiting for deletion). Blocking."""
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._take_producer_snapshot(self._log_end_offset, sync=True)
            self._set_closed()
            view = self._view
            waiting, self._flush_waiting = self._flush_waiting, None
        if waiting is not None:  # the flush just made covers it
            waiting.set_result(None)
        self.sweep_deleted_segments(force=True)
        with self._flush_lock:
            for seg in view.segments:
                seg.close()
        logger.info("%s Closed at log end offset %d", self._prefix(), self._log_end_offset)

    def close_for_delete(self) -> None:
        """Stops the log without flushing: its data is about to be deleted."""
        with self._lock:
            self._set_closed()

    def delete(self) -> None:
        """Closes the log and removes its directory with every file in it. Blocking."""
        with self._lock:
            self._set_closed()
            view = self._view
        self.sweep_deleted_segments(force=True)
        with self._flush_lock:
            for seg in view.segments:
                try:
                    seg.close()
                except (OSError, ValueError):
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)
        logger.info("%s Deleted log", self._prefix())

    def rename_for_delete(self) -> str:
        """Renames the directory to ``<topic>-<partition>.<id>-delete`` so a restart
        finishes an interrupted delete; open descriptors stay valid. Returns the new path."""
        with self._lock:
            self._set_closed()
            target = f"{self.dir}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            os.rename(self.dir, target)
            self.dir = target
            return target


def _mtime_ms(segment: Segment) -> int:
    try:
        return int(os.stat(segment.path).st_mtime * 1000)
    except OSError:
        return 0
