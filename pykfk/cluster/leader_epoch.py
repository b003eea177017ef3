"""Leader epoch cache of one partition and its ``leader-epoch-checkpoint`` file (KIP-101,
apache/kafka ``LeaderEpochFileCache`` / ``LeaderEpochCheckpointFile``).

Each entry says "leader epoch E wrote its first record at start offset S". A leader adds
an entry when it takes over (its log end offset at that moment); a follower adds one when
it appends the first batch stamped with a newer ``partition_leader_epoch``. The end offset
of epoch E is the start offset of the first later epoch (the log end offset for the
latest), which is what OffsetForLeaderEpoch answers, and a returning replica truncates to
it so that a tail written under an epoch the new leader never saw is discarded.

File layout (text, one item per line)::

    0                 format version
    2                 number of entries
    3 0               epoch start_offset
    5 1200

Written whole and atomically on every change (changes happen on leadership moves only).
A leader's new entry is written off the event loop (``assign_in_worker``: the write and
its fsync take 1-300 ms on a busy disk): by one writer thread for every partition, so a
partition's writes land in the order they were made, and the partition takes the
leadership only once its entry is durable, as Kafka's leader flushes the file before it
takes appends (its checkpoint never misses an epoch of records on disk).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os

from pykfk.log.checkpoints import write_atomic

log = logging.getLogger("pykfk.cluster")

CHECKPOINT_FILE = "leader-epoch-checkpoint"
FORMAT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1

# The one thread that writes leader epoch files off the loop: one thread keeps each
# file's writes in the order they were made (the last one wins, as on the loop).
_WRITER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="pykfk-epoch-writer")


async def writes_done() -> None:
    """Returns once every write handed to the writer thread so far is done, and what
    the loop was told of them (callbacks it was handed before) has run."""
    await asyncio.wrap_future(_WRITER.submit(lambda: None))
    await asyncio.sleep(0)


class LeaderEpochCache:
    """(epoch, start_offset) entries, epochs and offsets both increasing. Loop-affine."""

    def __init__(self, partition_dir: str, *, sync: bool = True,
                 entries: list[tuple[int, int]] | None = None):
        """``entries`` given: the known content (a new partition has no file to read)."""
        self.path = os.path.join(partition_dir, CHECKPOINT_FILE)
        self.sync = sync
        self.entries: list[tuple[int, int]] = self._read() if entries is None else entries
        # The last write handed to the writer thread.
        self._writing: concurrent.futures.Future[None] | None = None

    def _read(self) -> list[tuple[int, int]]:
        try:
            with open(self.path, encoding="ascii") as f:
                lines = f.read().split("\n")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            return []
        try:
            if int(lines[0]) != FORMAT_VERSION:
                raise ValueError(f"unsupported version {lines[0]!r}")
            count = int(lines[1])
            entries = []
            for line in lines[2 : 2 + count]:
                epoch, start = line.split()
                entries.append((int(epoch), int(start)))
            if len(entries) != count:
                raise ValueError(f"expected {count} entries, found {len(entries)}")
        except (ValueError, IndexError) as exc:
            log.warning("ignoring malformed %s: %s", self.path, exc)
            return []
        return entries

    def _text(self) -> bytes:
        return (f"{FORMAT_VERSION}\n{len(self.entries)}\n" + "".join(
            f"{epoch} {start}\n" for epoch, start in self.entries
        )).encode("ascii")

    def _write(self) -> None:
        if self.writing() is not None:
            # A write is queued: this one goes after it, or it would be overtaken.
            self._write_in_worker()
            return
        self._write_text(self._text(), self.sync)

    def _write_text(self, data: bytes, sync: bool) -> None:
        try:
            write_atomic(self.path, data, sync=sync)
        except FileNotFoundError:
            pass  # the partition directory was deleted meanwhile

    def _write_in_worker(self) -> concurrent.futures.Future[None]:
        future = self._writing = _WRITER.submit(self._write_text, self._text(), self.sync)
        return future

    def writing(self) -> concurrent.futures.Future[None] | None:
        """The write still queued or running in the writer thread, if any."""
        future = self._writing
        return future if future is not None and not future.done() else None

    def needs_entry(self, epoch: int) -> bool:
        """Whether ``assign(epoch, ...)`` would add an entry."""
        return epoch >= 0 and (not self.entries or epoch > self.entries[-1][0])

    def assign_in_worker(self, epoch: int, start_offset: int) -> concurrent.futures.Future[None] | None:
        """``assign``, the file written (and synced) by the writer thread: the future of
        that write, or of the one still queued when the entry was there already, or
        None when the file holds it."""
        if not self.needs_entry(epoch):
            return self.writing()
        self._add(epoch, start_offset)
        return self._write_in_worker()

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``; ignored unless newer than the
        latest entry (a follower sees the same epoch on many batches)."""
        if not self.needs_entry(epoch):
            return
        self._add(epoch, start_offset)
        self._write()

    def _add(self, epoch: int, start_offset: int) -> None:
        # An entry whose start is at or after the new one can hold no data any more.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, the offset where it ended): Kafka's
        ``endOffsetFor``. (-1, -1) when ``epoch`` is older than every entry."""
        if not self.entries or epoch < self.entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self.entries[-1][0]:
            return self.entries[-1][0], log_end_offset
        found = self.entries[0][0]
        for i, (e, _start) in enumerate(self.entries):
            if e > epoch:
                return found, self.entries[i][1]
            found = e
        return found, log_end_offset  # pragma: no cover - the loop always returns

    def epoch_for(self, offset: int) -> int:
        """The epoch of the leader that wrote ``offset`` (-1 when no entry covers it)."""
        found = UNDEFINED_EPOCH
        for epoch, start in self.entries:
            if start > offset:
                break
            found = epoch
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: forget epochs that start at or after it."""
        before = len(self.entries)
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        if len(self.entries) != before:
            self._write()

    def clear_and_start_at(self, offset: int) -> None:
        """The log restarted empty at ``offset``."""
        if self.entries:
            self.entries = []
            self._write()
