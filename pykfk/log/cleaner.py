"""Log compaction: the log cleaner of topics with cleanup.policy=compact (the Kafka design
documents' "Log Compaction"; apache/kafka ``LogCleaner``, ``LogCleanerManager``).

A compacted log keeps at least the last record of every key. The part of the log below
the cleaner checkpoint is *clean* (already deduplicated); from there to the first
uncleanable offset it is *dirty*. One cleaning of a log:

1. first dirty offset: this log's entry in ``<log.dir>/cleaner-offset-checkpoint`` (Kafka's
   text checkpoint: version, count, ``topic partition offset`` lines), else the log start;
2. first uncleanable offset: the base of the active segment, of the first segment not
   wholly below the high watermark, and of the first segment holding a record younger
   than min.compaction.lag.ms (by its largest timestamp, its mtime when it has none);
3. clean only when dirty bytes / (clean + dirty bytes) >= min.cleanable.dirty.ratio;
4. offset map: key -> latest offset over the dirty records (keys hashed to 16 bytes, as
   Kafka's MD5 map; a full map ends the dirty range early, the rest waits for the next
   pass);
5. every segment below that end is rewritten, in groups of consecutive segments that fit
   one segment (segment.bytes, 32-bit relative offsets). A record stays when no later
   record of its key is in the map. Records without a key go (Kafka's cleaner drops them;
   the produce path refuses them on a compacted topic). A tombstone (null value) that is
   the latest of its key stays until delete.retention.ms after its segment was last
   written (Kafka's rule before KIP-534: by segment mtime, which cleaning preserves);
6. each group is written to ``<base>.log.cleaned``, fsynced, and handed to
   ``Log.replace_segments`` (rename to ``.swap``, old segments to ``.deleted``, ``.swap`` to
   ``.log``); then the checkpoint moves to the end of the dirty range.

Batches keep their base offset, last_offset_delta, partition leader epoch, producer id,
epoch and base sequence, attributes and codec: records keep their offsets, and a batch's
offset range is unchanged, so consumers advance past it as before. A batch with every
record kept is copied byte for byte; one with some kept is rebuilt with the same codec
(offset deltas with gaps); one with none kept is dropped, except that the last batch of an
idempotent producer becomes an empty batch (header only, records_count 0, as Kafka keeps
it) so its sequence state survives a reload; an empty batch that is no longer its
producer's last goes at the next cleaning.

Transactions (Kafka's cleaner does the same, ``CleanedTransactionMetadata``): the dirty
range ends before the last stable offset, so open transactions are never cleaned; the
batches of aborted transactions (a transactional batch of a producer inside one of its
ranges in the log's aborted-transactions index) are removed whole and count for nothing in
the offset map, so an aborted write never hides a committed value of its key. Every
cleaning reads the log from its start in offset order and follows each producer's
transactions to their COMMIT/ABORT marker (a control batch):

- a marker stays unchanged while a batch of the transaction it ends is still in the log
  (a committed record not yet superseded, or a batch kept empty as its producer's last):
  read_committed consumers need it to end the transaction;
- a marker that is its producer's last state stays too (a producer fenced by a marker of a
  newer epoch has no data batch at that epoch: the marker carries the epoch);
- otherwise the marker may go, but not at once: the cleaning that finds it so rewrites it
  with Kafka's delete-horizon flag (attributes bit 6, KIP-534) and now +
  delete.retention.ms as its base timestamp (its record keeps its timestamp), and the
  first cleaning at or after that horizon drops it. A consumer that read the
  transaction's batches before they were cleaned has delete.retention.ms to reach the
  marker. As with tombstones, the drop waits for a cleaning, which needs dirty bytes.

A dropped ABORT marker takes its entry in the aborted-transactions index (and the
segment's ``.txnindex``) with it, in the same ``Log.replace_segments`` that swaps the
cleaned segment in: a read_committed Fetch is never told of an aborted transaction whose
marker is gone (its consumer would skip the producer's later batches). Unknown control
batches are copied unchanged.

Threads: ``clean_logs`` blocks; the LogManager runs it on its worker thread every
log.cleaner.backoff.ms. Readers are never disturbed: a replaced segment keeps its
descriptor open for file.delete.delay.ms.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import struct
from collections.abc import Iterable, Iterator, Mapping

from pykfk._core import records as core_records
from pykfk._core.crc import crc32c
from pykfk._core.segment import Segment
from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.log.checkpoints import CheckpointError, read_offset_checkpoint, write_offset_checkpoint
from pykfk.log.log import INT32_MAX, LOG_SUFFIX, Log, segment_file_name
from pykfk.log.transactions import ABORT, marker_type

logger = logging.getLogger("pykfk.log.cleaner")

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"

# log.cleaner.dedupe.buffer.size (Kafka's default: 128 MiB for all cleaner threads).
DEFAULT_DEDUPE_BUFFER_SIZE = 128 * 1024 * 1024
# Memory one offset-map entry costs here: a 16-byte digest object, an int and a dict slot
# (measured with sys.getsizeof on CPython 3.11, rounded up). Kafka's packed map needs 24.
OFFSET_MAP_ENTRY_BYTES = 128
# Bytes read from a segment at a time (a batch larger than this is read whole).
READ_CHUNK_BYTES = 1024 * 1024
# The v2 batch header, from the core's one declaration of it: the fields before the CRC
# (base_offset .. magic) and the CRC-covered ones (attributes .. records_count).
BATCH_HEADER_SIZE = core_records.BATCH_HEADER_SIZE
_CRC_AT = core_records.BATCH_FIELD_OFFSETS["crc"]
_HEADER_BEFORE_CRC = struct.Struct(core_records.BATCH_HEADER_FORMAT[:5])  # ">qiib"
_HEADER_AFTER_CRC = struct.Struct(">" + core_records.BATCH_HEADER_FORMAT[6:])  # ">hiqqqhii"
_CONTROL_FLAG = core_records.ATTR_CONTROL
_CODEC_MASK = core_records.ATTR_CODEC_MASK
# Attributes bit 6, Kafka's delete-horizon flag (KIP-534): the batch's base timestamp is the
# time from which the cleaner may remove it. Set here on transaction markers only.
DELETE_HORIZON_FLAG = 0x40


class CleanerAborted(Exception):
    """The log changed under the cleaner (truncated, segments deleted or closed)."""


def _key_digest(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


@dataclasses.dataclass
class CleanStats:
    """What one cleaning of a log did."""

    first_dirty_offset: int = 0
    end_offset: int = 0  # the new checkpoint: the dirty range cleaned ends here
    segments_before: int = 0
    segments_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_kept: int = 0
    records_removed: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0  # COMMIT/ABORT markers whose transaction left nothing behind


@dataclasses.dataclass
class _Cleanable:
    log: Log
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    dirty_bytes: int
    # The oldest dirty record is older than max.compaction.lag.ms: cleaned whatever the ratio.
    overdue: bool = False

    @property
    def due(self) -> bool:
        return self.overdue or self.ratio >= self.log.config.min_cleanable_dirty_ratio

    @property
    def ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _batches(seg: Segment, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(position, bytes of whole batches) chunks of a segment's .log, read with pread."""
    # Pinned: the open-file LRU must not close a sealed segment's .log under the read.
    fd = seg.pin()
    try:
        end = seg.size if end is None else end
        position = start
        while position < end:
            want = min(READ_CHUNK_BYTES, end - position)
            data = os.pread(fd, want, position)
            count, complete = core_records.scan_batches(data)
            if count == 0:
                if len(data) < BATCH_HEADER_SIZE:
                    raise CleanerAborted(f"segment {seg.base_offset} ends in a torn batch")
                size = core_records.parse_batch_header(data).size
                if position + size > end:
                    raise CleanerAborted(f"segment {seg.base_offset} ends in a torn batch")
                data = os.pread(fd, size, position)
                complete = size
            yield position, data[:complete] if complete < len(data) else data
            position += complete
    finally:
        seg.unpin()


class _AbortedRanges:
    """The log's aborted transactions as offset ranges per producer id: which
    transactional batches the cleaner removes."""

    def __init__(self, log: Log):
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for txn in log.aborted_txns.entries:
            self._ranges.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def covers(self, header: core_records.BatchHeader) -> bool:
        """A data batch of an aborted transaction."""
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._ranges.get(header.producer_id)
        return ranges is not None and any(first <= header.base_offset <= last for first, last in ranges)

    def batch_indexes(self, batches: list[core_records.BatchHeader]) -> frozenset[int]:
        return frozenset(i for i, header in enumerate(batches) if self.covers(header))


class _CleanedTransactions:
    """What one cleaning learns of transactions while it reads the log's batches in offset
    order from the log start (Kafka's ``CleanedTransactionMetadata``): which data batches
    belong to aborted transactions, whether the transaction a marker ends kept a batch in
    the cleaned log, and which batches hold a producer's last state."""

    def __init__(self, log: Log, now_ms: int):
        self.aborted = _AbortedRanges(log)
        self.now_ms = now_ms
        self.delete_retention_ms = log.config.delete_retention_ms
        # Per producer id, what keeps its state through a reload (Kafka keeps the last
        # batch of every producer): the last offset of its last data batch; for a producer
        # without data batches at its current epoch (fenced by a marker), that epoch,
        # whose markers then stay.
        self.last_data_offset: dict[int, int] = {}
        self.marker_epoch: dict[int, int] = {}
        producers = getattr(log.producer_state, "producers", {}) or {}
        for pid, entry in list(producers.items()):  # one copy: appends may add producers
            if entry.last_offset >= 0:
                self.last_data_offset[pid] = entry.last_offset
            elif entry.producer_epoch >= 0:
                self.marker_epoch[pid] = entry.producer_epoch
        # Producer ids whose current transaction (since their last marker) kept a batch.
        self._with_data: set[int] = set()
        # ABORT markers removed from the segment group being written.
        self.removed_aborts: list[int] = []

    def is_last_of_producer(self, header: core_records.BatchHeader) -> bool:
        pid = header.producer_id
        if pid < 0:
            return False
        if header.is_control:
            return self.marker_epoch.get(pid) == header.producer_epoch
        return self.last_data_offset.get(pid) == header.last_offset

    def data_kept(self, header: core_records.BatchHeader) -> None:
        """A data batch (whole, rebuilt or emptied) is in the cleaned log."""
        if header.is_transactional and header.producer_id >= 0:
            self._with_data.add(header.producer_id)

    def control_batch(self, raw: bytes, header: core_records.BatchHeader,
                      stats: CleanStats) -> bytes:
        """What stays of a control batch. A COMMIT or ABORT marker stays while its
        transaction has a batch left before it (a read_committed reader needs it to end
        the transaction) or while it is its producer's last state. Otherwise it gets a
        delete horizon, delete.retention.ms from now, and goes in the first cleaning after
        it: a consumer that read the transaction's batches before they were cleaned has
        that long to read the marker too."""
        pid = header.producer_id
        kind = marker_type(raw) if pid >= 0 else None
        if kind is None:
            return raw  # not a marker this broker knows: kept as it is
        had_data = pid in self._with_data
        self._with_data.discard(pid)
        if had_data or self.is_last_of_producer(header):
            return raw
        if not header.attributes & DELETE_HORIZON_FLAG:
            return with_delete_horizon(raw, header, self.now_ms + self.delete_retention_ms)
        if header.base_timestamp > self.now_ms:
            return raw
        stats.markers_removed += 1
        if kind == ABORT:
            self.removed_aborts.append(header.base_offset)
        return b""


def _varint(value: int) -> bytes:
    """Zigzag varint (varlong) of a v2 record field."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length_prefixed(data: bytes | str | None) -> bytes:
    if data is None:
        return _varint(-1)
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return _varint(len(raw)) + raw


def with_delete_horizon(raw: bytes, header: core_records.BatchHeader, horizon_ms: int) -> bytes:
    """The batch ``raw`` (a control batch, the records of which are few) with the
    delete-horizon flag and ``horizon_ms`` as its base timestamp, uncompressed. Its records
    keep their offsets and timestamps (the timestamp deltas are taken from the new base,
    negative ones included, as Kafka's cleaner writes them)."""
    body = bytearray()
    count = 0
    for record in core_records.iter_records(raw):
        fields = bytearray(b"\0")  # record attributes
        fields += _varint(record.timestamp - horizon_ms)
        fields += _varint(record.offset - header.base_offset)
        fields += _length_prefixed(record.key) + _length_prefixed(record.value)
        fields += _varint(len(record.headers))
        for key, value in record.headers:
            fields += _length_prefixed(key) + _length_prefixed(value)
        body += _varint(len(fields)) + fields
        count += 1
    attributes = (header.attributes & ~_CODEC_MASK) | DELETE_HORIZON_FLAG
    tail = _HEADER_AFTER_CRC.pack(attributes, header.last_offset_delta, horizon_ms,
                                  header.max_timestamp, header.producer_id,
                                  header.producer_epoch, header.base_sequence, count) + body
    head = _HEADER_BEFORE_CRC.pack(header.base_offset,
                                   BATCH_HEADER_SIZE - core_records.LOG_OVERHEAD + len(body),
                                   header.partition_leader_epoch, 2)
    return head + struct.pack(">I", crc32c(tail)) + tail


def _mtime_ms(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime * 1000)
    except OSError:
        return 0


def empty_batch(header: core_records.BatchHeader) -> bytes:
    """A batch with ``header``'s offsets and producer fields and no records (Kafka's
    ``DefaultRecordBatch.writeEmptyHeader``): keeps an idempotent producer's last sequence
    in the log after compaction removed every record of its last batch."""
    attributes = header.attributes & ~_CODEC_MASK  # no records: nothing compressed
    tail = _HEADER_AFTER_CRC.pack(attributes, header.last_offset_delta, header.base_timestamp,
                                  header.max_timestamp, header.producer_id,
                                  header.producer_epoch, header.base_sequence, 0)
    head = _HEADER_BEFORE_CRC.pack(header.base_offset, BATCH_HEADER_SIZE - core_records.LOG_OVERHEAD,
                                   header.partition_leader_epoch, 2)
    return head + struct.pack(">I", crc32c(tail)) + tail


class LogCleaner:
    """Compacts the logs with cleanup.policy=compact. ``dedupe_buffer_size``
    (log.cleaner.dedupe.buffer.size) bounds the offset map of one cleaning."""

    def __init__(self, *, dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE, clock: Clock = SYSTEM_CLOCK):
        self.clock = clock
        if dedupe_buffer_size < OFFSET_MAP_ENTRY_BYTES:
            raise ValueError(f"dedupe_buffer_size must be at least {OFFSET_MAP_ENTRY_BYTES}")
        self.max_map_entries = dedupe_buffer_size // OFFSET_MAP_ENTRY_BYTES

    # -- checkpoint ------------------------------------------------------------------

    @staticmethod
    def read_checkpoint(log_dir: str) -> dict[tuple[str, int], int]:
        try:
            return read_offset_checkpoint(os.path.join(log_dir, CLEANER_CHECKPOINT))
        except CheckpointError as exc:
            # Without it every compacted log is dirty from its start: more work, same result.
            logger.warning("Ignoring unreadable cleaner checkpoint: %s", exc)
            return {}

    @staticmethod
    def _write_checkpoint(log_dir: str, offsets: Mapping[tuple[str, int], int]) -> None:
        write_offset_checkpoint(os.path.join(log_dir, CLEANER_CHECKPOINT), offsets)

    # -- one pass --------------------------------------------------------------------

    def clean_logs(self, logs: Iterable[Log], now_ms: int | None = None) -> list[CleanStats]:
        """One pass: cleans every compacted log whose dirty ratio reaches its
        min.cleanable.dirty.ratio, the filthiest first. Blocking."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        by_dir: dict[str, list[Log]] = {}
        for log in logs:
            if log.config.compacts:
                by_dir.setdefault(os.path.dirname(log.dir), []).append(log)
        done = []
        for log_dir, dir_logs in by_dir.items():
            checkpoint = self.read_checkpoint(log_dir)
            candidates = []
            for log in dir_logs:
                try:
                    cleanable = self.cleanable(log, checkpoint.get((log.topic, log.partition)), now)
                except (CleanerAborted, OSError, ValueError):
                    continue
                if cleanable is not None and cleanable.due:
                    candidates.append(cleanable)
            # Kafka's order: logs past their max.compaction.lag.ms first, then the filthiest.
            candidates.sort(key=lambda c: (c.overdue, c.ratio), reverse=True)
            for cleanable in candidates:
                log = cleanable.log
                try:
                    stats = self.clean(cleanable, now)
                except CleanerAborted as exc:
                    logger.info("%s Cleaning aborted: %s", log._prefix(), exc)
                    continue
                except Exception:
                    logger.exception("%s Cleaning failed", log._prefix())
                    continue
                checkpoint[(log.topic, log.partition)] = stats.end_offset
                live = {(lg.topic, lg.partition) for lg in dir_logs}
                self._write_checkpoint(log_dir, {tp: o for tp, o in checkpoint.items() if tp in live})
                done.append(stats)
        return done

    def cleanable(self, log: Log, checkpoint: int | None, now_ms: int) -> _Cleanable | None:
        """The clean and dirty ranges of ``log`` (None when nothing is cleanable)."""
        segments = log.segments
        start, end = log.log_start_offset, log.log_end_offset
        first_dirty = start if checkpoint is None or not start <= checkpoint <= end else checkpoint
        # Open transactions are not cleaned: their outcome decides what stays.
        high_watermark = log.last_stable_offset
        lag_horizon = now_ms - log.config.min_compaction_lag_ms
        first_uncleanable = segments[-1].base_offset
        for seg in segments[:-1]:
            if seg.next_offset > high_watermark:
                first_uncleanable = min(first_uncleanable, seg.base_offset)
                break
            if log.config.min_compaction_lag_ms > 0 and seg.base_offset >= first_dirty:
                newest = seg.max_timestamp if seg.max_timestamp >= 0 else _mtime_ms(seg.path)
                if newest > lag_horizon:
                    first_uncleanable = min(first_uncleanable, seg.base_offset)
                    break
        if first_dirty >= first_uncleanable:
            return None
        clean = dirty = 0
        for seg in segments:
            if seg.base_offset >= first_uncleanable:
                break
            if seg.next_offset <= first_dirty:
                clean += seg.size
            else:
                dirty += seg.size
        if dirty == 0:
            return None
        return _Cleanable(log, first_dirty, first_uncleanable, clean, dirty,
                          self._overdue(log, segments, first_dirty, now_ms))

    @staticmethod
    def _overdue(log: Log, segments: list[Segment], first_dirty: int, now_ms: int) -> bool:
        """Whether the first dirty segment's oldest record (its first batch's timestamp,
        else the file's age) is older than max.compaction.lag.ms (KIP-354)."""
        lag = log.config.max_compaction_lag_ms
        if lag >= now_ms:
            return False
        for seg in segments:
            if seg.next_offset > first_dirty:
                oldest = seg.first_batch_timestamp if seg.first_batch_timestamp >= 0 else _mtime_ms(seg.path)
                return oldest < now_ms - lag
        return False

    def clean_log(self, log: Log, now_ms: int | None = None, *, force: bool = False) -> CleanStats | None:
        """Cleans one log now (ignoring min.cleanable.dirty.ratio with ``force``) and moves
        its checkpoint; None when nothing was cleanable."""
        now = self.clock.time_ms() if now_ms is None else now_ms
        log_dir = os.path.dirname(log.dir)
        checkpoint = self.read_checkpoint(log_dir)
        tp = (log.topic, log.partition)
        cleanable = self.cleanable(log, checkpoint.get(tp), now)
        if cleanable is None or not (force or cleanable.due):
            return None
        stats = self.clean(cleanable, now)
        checkpoint[tp] = stats.end_offset
        self._write_checkpoint(log_dir, checkpoint)
        return stats

    # -- the algorithm ----------------------------------------------------------------

    def clean(self, cleanable: _Cleanable, now_ms: int) -> CleanStats:
        log = cleanable.log
        stats = CleanStats(first_dirty_offset=cleanable.first_dirty)
        segments = [s for s in log.segments if s.base_offset < cleanable.first_uncleanable]
        txns = _CleanedTransactions(log, now_ms)
        offset_map, end = self._build_offset_map(segments, cleanable.first_dirty,
                                                 cleanable.first_uncleanable, txns.aborted)
        stats.end_offset = end
        to_clean = [s for s in segments if s.base_offset < end]
        stats.segments_before = len(to_clean)
        stats.bytes_before = sum(s.size for s in to_clean)
        delete_horizon = now_ms - log.config.delete_retention_ms
        # Every segment from the log start is read in order (a transaction's batches come
        # before its marker): the segments before the dirty range too.
        for group in self._group_segments(to_clean, log.config.segment_bytes):
            new_size = self._clean_group(log, group, offset_map, delete_horizon, txns, stats)
            stats.segments_after += 1
            stats.bytes_after += new_size
        logger.info("%s Cleaned offsets %d-%d: %d segments (%d bytes) -> %d (%d bytes), "
                    "%d records kept, %d removed (%d tombstones), %d markers removed",
                    log._prefix(), log.log_start_offset, end, stats.segments_before,
                    stats.bytes_before, stats.segments_after, stats.bytes_after,
                    stats.records_kept, stats.records_removed, stats.tombstones_removed,
                    stats.markers_removed)
        return stats

    def _build_offset_map(self, segments: list[Segment], first_dirty: int,
                          first_uncleanable: int, aborted: _AbortedRanges) -> tuple[dict[bytes, int], int]:
        """key digest -> latest offset over [first_dirty, first_uncleanable); returns the
        map and the offset the dirty range ends at (earlier when the map filled)."""
        offset_map: dict[bytes, int] = {}
        limit = self.max_map_entries
        for seg in segments:
            if seg.next_offset <= first_dirty:
                continue
            start = seg.position_of(first_dirty) if first_dirty > seg.base_offset else 0
            for _, data in _batches(seg, start):
                decoded = core_records.decode_records(data, first_dirty)
                offsets, key_lengths = decoded.offsets, decoded.key_lengths
                dropped = aborted.batch_indexes(decoded.batches) if aborted else frozenset()
                batch_index = decoded.batch_index
                for i in range(len(decoded)):
                    if key_lengths[i] < 0 or (dropped and batch_index[i] in dropped):
                        continue
                    digest = _key_digest(decoded.key(i) or b"")  # never None: key length >= 0
                    if digest not in offset_map and len(offset_map) >= limit:
                        # Full: the dirty range ends before this record (at a batch
                        # boundary would be tidier; any point is correct, since records
                        # past the map's end are kept unless a later one is in the map).
                        return offset_map, max(offsets[i], first_dirty + 1)
                    offset_map[digest] = offsets[i]
        return offset_map, first_uncleanable

    @staticmethod
    def _group_segments(segments: list[Segment], max_bytes: int) -> list[list[Segment]]:
        """Consecutive segments whose total size fits one segment and whose offsets fit
        32-bit relative offsets from the group's base (Kafka's groupSegmentsBySize)."""
        groups: list[list[Segment]] = []
        for seg in segments:
            if groups:
                group = groups[-1]
                size = sum(s.size for s in group)
                if (size + seg.size <= max_bytes
                        and seg.next_offset - 1 - group[0].base_offset <= INT32_MAX):
                    group.append(seg)
                    continue
            groups.append([seg])
        return groups

    def _clean_group(self, log: Log, group: list[Segment], offset_map: dict[bytes, int],
                     delete_horizon: int, txns: _CleanedTransactions, stats: CleanStats) -> int:
        base = group[0].base_offset
        txns.removed_aborts = []
        path = os.path.join(log.dir, segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        written = 0
        try:
            try:
                for seg in group:
                    retain_deletes = _mtime_ms(seg.path) > delete_horizon
                    for _, data in _batches(seg):
                        out = self._filter_chunk(data, offset_map, retain_deletes, txns, stats)
                        if out:
                            os.write(fd, out)
                            written += len(out)
                os.fsync(fd)
            finally:
                os.close(fd)
            # The cleaned segment keeps the age of the data it holds (retention by time
            # and the tombstone horizon read it).
            mtime = max(os.stat(s.path).st_mtime for s in group)
            os.utime(path, (mtime, mtime))
            log.replace_segments(group, path, removed_aborts=txns.removed_aborts)
        except BaseException:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            raise
        return written

    def _filter_chunk(self, data: bytes, offset_map: dict[bytes, int], retain_deletes: bool,
                      txns: _CleanedTransactions, stats: CleanStats) -> bytes:
        decoded = core_records.decode_records(data)
        aborted = txns.aborted
        # Records of each batch that has any, by the batch's base offset.
        spans: dict[int, tuple[int, int]] = {}
        batch_index = decoded.batch_index
        i, n = 0, len(decoded)
        while i < n:
            j = i
            while j < n and batch_index[j] == batch_index[i]:
                j += 1
            spans[decoded.batches[batch_index[i]].base_offset] = (i, j)
            i = j
        offsets, key_lengths, value_lengths = (decoded.offsets, decoded.key_lengths,
                                               decoded.value_lengths)
        out = bytearray()
        position = 0
        while position < len(data):
            header = core_records.parse_batch_header(data, position)
            raw = data[position:position + header.size]
            position += header.size
            if header.attributes & _CONTROL_FLAG:
                out += txns.control_batch(raw, header, stats)
                continue
            span = spans.get(header.base_offset)
            if span is None:
                # Emptied by an earlier cleaning: kept while it holds its producer's state.
                if txns.is_last_of_producer(header):
                    out += raw
                    txns.data_kept(header)
                continue
            keep = []
            if aborted and aborted.covers(header):
                stats.records_removed += span[1] - span[0]
                span = (span[0], span[0])  # the whole batch goes: its transaction aborted
            for r in range(span[0], span[1]):
                if key_lengths[r] < 0:
                    stats.records_removed += 1
                    continue
                latest = offset_map.get(_key_digest(decoded.key(r) or b""))
                if latest is not None and offsets[r] < latest:
                    stats.records_removed += 1
                    continue
                if value_lengths[r] < 0 and not retain_deletes:
                    stats.records_removed += 1
                    stats.tombstones_removed += 1
                    continue
                keep.append(r)
            stats.records_kept += len(keep)
            if keep and len(keep) == span[1] - span[0]:
                out += raw
            elif keep:
                out += core_records.build_batch(
                    [(decoded.key(r), decoded.value(r), decoded.timestamps[r], decoded.headers(r))
                     for r in keep],
                    base_offset=header.base_offset, compression=header.compression,
                    producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                    base_sequence=header.base_sequence,
                    partition_leader_epoch=header.partition_leader_epoch,
                    timestamp_type=header.timestamp_type,
                    is_transactional=header.is_transactional,
                    offset_deltas=[offsets[r] - header.base_offset for r in keep],
                    last_offset_delta=header.last_offset_delta)
            elif txns.is_last_of_producer(header):
                out += empty_batch(header)
            else:
                continue
            txns.data_kept(header)
        return bytes(out)
