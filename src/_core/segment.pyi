"""Log segments: a .log of magic-2 record batches with its sparse .index and .timeindex
(apache/kafka LogSegment, OffsetIndex, TimeIndex).

Files of a segment based at offset B in a partition directory (Kafka's names and formats):

    <B:020d>.log        record batches back to back, nothing else
    <B:020d>.index      8-byte entries: relative offset int32, position int32 (big-endian)
    <B:020d>.timeindex  12-byte entries: timestamp int64, relative offset int32

Index points (Kafka's rule): a batch gets an .index entry (its last offset, its position)
when more than ``index_interval_bytes`` were written since the batch of the previous
entry; at the same points the .timeindex gets (max timestamp so far, last offset of the
batch that first reached it) if the max timestamp grew since its last entry. Rebuilding
the indexes from the .log gives exactly the entries the appends wrote.

A new segment creates only its .log; its index files appear at their first entry, or
when it is sealed or closed. While a segment is active its index files are extended
(sparse) to ``max_index_bytes`` rounded down to whole entries; ``seal()`` and ``close()``
trim them to the used entries. On open the used entries are counted from the data: the
last non-zero entry ends them (an all-zero entry 0 counts when anything follows it).
Entries are read and written through shared memory mappings that hold no file
descriptor (the disk blocks under an entry are reserved with posix_fallocate before it
is stored, so a full disk freezes the index instead of faulting); no buffer export
outlives a call. A mapping that reaches past the used entries into the holes (an active
segment's) is advised random access, so the page cache holds only the pages its entries
use: no read-ahead of zeros around a fault (up to the device's read_ahead_kb each).

File descriptors and mappings: a segment holds one descriptor, its .log's, and two
mappings, its indexes'. An active segment keeps them until it is sealed or closed. A
sealed segment's (``seal()``: the log rolled past it) are one entry of a process-wide
LRU of at most ``open_sealed_segments_limit()`` and may be closed and unmapped between
uses; every operation reopens and remaps them by path as needed. ``pin()`` keeps the
descriptor open across a send (until ``unpin()``), even past ``close()``.

``new=True`` says the directory was just made: no index file is looked for (each is
created at its first entry).

Damaged files, defined behaviour:

* Index file missing while the .log has data, index length not a whole number of
  entries, or the cheap open check failing (last .index entry does not name the batch at
  its position, entries out of order or beyond the log): with
  ``rebuild_bad_indexes=True`` (default) both indexes are rebuilt from the .log on open,
  ``indexes_rebuilt`` is True and ``index_rebuild_reason`` says why; with False the
  constructor raises ``IndexCorruptError`` and leaves the files untouched.
* Damage the open check cannot see (an entry in the middle out of order, or pointing
  between batches): ``sanity_check()`` (``deep=True`` verifies every entry against the
  log) returns False; the caller then calls ``rebuild_indexes()``.
* The .log ends in a torn or damaged batch header (found on open while walking the tail
  after the last index entry): ``needs_recovery`` is True, ``size`` covers only the whole
  batches before it (reads never go further), and ``append`` raises RuntimeError until
  ``recover()`` has truncated the file. Damage in the middle of the .log (bad CRC) is
  found only by ``recover()``, which checks every batch.

Threads: a Segment belongs to one thread (the event loop), except that ``flush()`` may run
in a worker thread at the same time as ``append``/``read``. ``append`` and ``flush`` release
the GIL around write/fsync; ``recover`` and ``rebuild_indexes`` release it while walking
the log (and refuse concurrent use). ``close``, ``truncate_to`` and ``recover`` raise
RuntimeError while an append or flush is in flight in another thread.
"""

from collections.abc import Callable

from typing_extensions import Buffer as _Buffer
from typing_extensions import Self

INDEX_ENTRY_SIZE_BYTES: int
TIMEINDEX_ENTRY_SIZE_BYTES: int
PROGRESS_INTERVAL_BYTES: int

def segment_file_name(base_offset: int, suffix: str) -> str:
    """Kafka's file name: 20-digit zero-padded base offset + suffix ('.log', '.index', ...)."""

def index_lookup(buf: _Buffer, target: int, entries: int = -1) -> tuple[int, int]:
    """(relative_offset, position) of the last .index entry whose relative offset is
    <= target, or (-1, -1). ``entries=-1`` counts the used entries from the data."""

def timeindex_lookup(buf: _Buffer, target_timestamp: int, entries: int = -1) -> tuple[int, int]:
    """(timestamp, relative_offset) of the last .timeindex entry whose timestamp is
    <= target_timestamp, or (-1, -1)."""

def used_entries(buf: _Buffer, entry_size: int) -> int:
    """Used entries of an index image (entry_size 8 or 12): up to the last non-zero one."""

DEFAULT_OPEN_SEALED_SEGMENTS: int

def set_open_sealed_segments_limit(limit: int) -> None:
    """At most ``limit`` sealed segments keep their .log open and their indexes mapped
    (pinned or busy ones excepted); the least recently used idle ones are closed and
    unmapped now if over it."""

def open_sealed_segments_limit() -> int: ...

def open_sealed_segments() -> int:
    """Sealed segments whose .log descriptor is open (and indexes mapped) now."""

class Segment:
    """One segment of a partition log: opens or creates the three files.

    ``index_interval_bytes`` (Kafka ``index.interval.bytes``) and ``max_index_bytes``
    (``segment.index.bytes``) are policy passed in by the log. ``preallocate=True``
    reserves the index files' disk blocks up front (posix_fallocate) instead of extending
    them sparsely; the .log itself is never preallocated, its file size is its data size.
    """

    base_offset: int
    """First offset this segment may hold (the number in its file names)."""
    size: int
    """Bytes of whole batches in the .log (see ``needs_recovery``)."""
    next_offset: int
    """Last offset + 1, or base_offset when empty."""
    max_timestamp: int
    """Largest batch max_timestamp, -1 when empty."""
    first_batch_timestamp: int
    """max_timestamp of the first batch (Kafka rolls by it for segment.ms), -1 when empty."""
    created_monotonic_ms: int
    """time.monotonic() in ms when this object was made (roll by time without timestamps)."""
    index_interval_bytes: int
    max_index_bytes: int
    path: str
    """The .log path."""
    index_path: str
    timeindex_path: str
    needs_recovery: bool
    indexes_rebuilt: bool
    index_rebuild_reason: str | None

    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_bytes: int = 10485760, preallocate: bool = False,
                 rebuild_bad_indexes: bool = True, new: bool = False) -> None: ...
    @property
    def index_entries(self) -> int: ...
    @property
    def timeindex_entries(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def sealed(self) -> bool: ...
    @property
    def holds_fd(self) -> bool:
        """True while the .log descriptor is open (always, unless sealed and evicted)."""
    def fileno(self) -> int:
        """File descriptor of the .log, reopened if the LRU closed it. For a sealed segment
        valid only until another sealed segment is used (in any thread): pin() instead
        to keep it."""
    def pin(self) -> int:
        """The .log descriptor, kept open until the matching unpin(), even past close()
        (a send in flight finishes on the file it started on). ValueError when closed."""
    def unpin(self) -> None: ...
    def create_index_files(self) -> None:
        """Creates a new segment's empty index files now instead of at its first entry
        (call it from a worker thread: it runs without the GIL). No-op once they exist,
        or when the segment is closed or sealed."""
    def seal(self) -> None:
        """The log rolled past this segment: trims the indexes to their used entries and
        lets the LRU close the .log between uses. An append unseals it. RuntimeError
        while an append or flush runs in another thread."""
    def append(self, buf: _Buffer, start: int = 0, end: int | None = None) -> int:
        """Appends the whole batches in buf[start:end] (offsets already assigned) at the end
        of the .log and indexes them; returns the position written at.

        Every header is checked first and nothing is written when any is torn or bad
        (CorruptBatchError), when a batch does not come after the offsets already held
        (ValueError), or when an offset no longer fits the 32-bit relative offsets or the
        file would pass 2 GiB (ValueError: roll a new segment). CRCs are not re-checked
        (the caller validated the batches). The write runs without the GIL and handles
        partial writes; on a write error the file is cut back and OSError raised. A full
        index stops taking entries (see is_index_full); the append still succeeds."""
    def append_active(self, buf: _Buffer, segment_bytes: int, max_segment_ms: int) -> int:
        """``append`` of one batch the leader gave offsets to, unless the log may have to
        roll first (segment.bytes, segment.ms by the batch's largest timestamp, a full
        index, the relative offset range, a segment without a first timestamp): then -1
        and nothing written."""
    def is_index_full(self) -> bool:
        """True when either index takes no more entries (time to roll), including after an
        index write failed (the index is then frozen; lookups stay correct)."""
    def read(self, offset: int, max_bytes: int, max_position: int = -1) -> tuple[int, int] | None:
        """(position, length) of whole batches starting with the first batch whose last offset
        is >= offset: at least that batch even beyond max_bytes, then as many whole batches
        as fit in max_bytes. Never passes max_position (-1: no cap). None when
        offset >= next_offset or no whole batch fits under max_position. An offset below
        base_offset reads from the first batch."""
    def position_of(self, offset: int) -> int:
        """Start of the first batch whose last offset is >= offset (the batch holding offset,
        or the next one after a gap), or size."""
    def index_lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last .index entry at or below offset, or
        (base_offset, 0) when there is none (Kafka's OffsetIndex.lookup)."""
    def timeindex_lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last .timeindex entry at or below timestamp, or
        (-1, base_offset) when there is none."""
    def index_entry(self, i: int) -> tuple[int, int]:
        """The i-th .index entry as (offset, position)."""
    def timeindex_entry(self, i: int) -> tuple[int, int]:
        """The i-th .timeindex entry as (timestamp, offset)."""
    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """base_offset of the first batch whose max_timestamp >= timestamp, or None. (Batch
        granularity: the caller finds the record inside the batch if it needs to.)"""
    def truncate_to(self, offset: int) -> int:
        """Removes every batch whose base_offset >= offset (a batch holding offset but
        starting before it stays); returns the bytes removed. Index entries of removed
        batches are dropped (zeroed on file)."""
    def recover(self, max_batch_size: int = 0, progress: Callable[[int, int], object] | None = None,
                *, check_records: bool = False,
                progress_interval: int = 16777216) -> int:
        """Checks every batch from the start (length, magic, CRC-32C, size <= max_batch_size
        when non-zero, record framing with check_records, offsets increasing and within the
        segment's range), truncates the .log at the first bad byte, rebuilds both indexes
        and the state; returns the bytes truncated. ``progress(bytes_done, total)`` is
        called about every ``progress_interval`` bytes and at the end. Runs without the GIL
        between callbacks: call it from a worker thread for large segments."""
    def rebuild_indexes(self) -> None:
        """Rebuilds both indexes and the state from the batch headers of the .log (no CRC
        check); sets needs_recovery when the .log ends in a torn or bad header."""
    def sanity_check(self, *, deep: bool = False) -> bool:
        """True when the indexes are consistent: offset entries strictly increasing in both
        fields, inside the log, the last one (every one with deep=True) naming the batch at
        its position; time entries increasing, within next_offset and max_timestamp."""
    def flush(self) -> None:
        """fsync the .log and both indexes, without the GIL."""
    def close(self) -> None:
        """Trims the indexes to their used entries and closes the files. Idempotent."""
    def delete(self) -> None:
        """Closes the segment and removes its three files."""
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc_info: object) -> None: ...
