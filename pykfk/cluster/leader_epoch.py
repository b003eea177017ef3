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
"""

from __future__ import annotations

import logging
import os

from pykfk.log.checkpoints import write_atomic

log = logging.getLogger("pykfk.cluster")

CHECKPOINT_FILE = "leader-epoch-checkpoint"
FORMAT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    """(epoch, start_offset) entries, epochs and offsets both increasing. Loop-affine."""

    def __init__(self, partition_dir: str, *, sync: bool = True,
                 entries: list[tuple[int, int]] | None = None):
        """``entries`` given: the known content (a new partition has no file to read)."""
        self.path = os.path.join(partition_dir, CHECKPOINT_FILE)
        self.sync = sync
        self.entries: list[tuple[int, int]] = self._read() if entries is None else entries

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

    def _write(self) -> None:
        text = f"{FORMAT_VERSION}\n{len(self.entries)}\n" + "".join(
            f"{epoch} {start}\n" for epoch, start in self.entries
        )
        try:
            write_atomic(self.path, text.encode("ascii"), sync=self.sync)
        except FileNotFoundError:
            pass  # the partition directory was deleted meanwhile

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``; ignored unless newer than the
        latest entry (a follower sees the same epoch on many batches)."""
        if epoch < 0:
            return
        if self.entries and epoch <= self.entries[-1][0]:
            return
        # An entry whose start is at or after the new one can hold no data any more.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self._write()

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
