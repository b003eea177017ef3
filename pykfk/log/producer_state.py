"""Idempotent producer state of one partition (apache/kafka ``ProducerStateManager``).

For every producer id the log remembers the producer epoch and the sequence and offset
ranges of its last five batches, so a retried batch is recognised and answered with its
original offsets instead of being written twice, and a gap in the sequence is refused.

Rules (Kafka's ``ProducerAppendInfo.checkProducerEpoch`` / ``checkSequence``, with the
pre-KIP-360 answer for producers the log has never seen):

- producer_id -1, and control batches: no checks, no state.
- no sequence (-1; the group coordinator's transactional offset commits, clients may not
  send such batches): only the epoch is checked.
- a batch equal (epoch, first and last sequence) to one of the last five: duplicate.
- epoch lower than the known one: INVALID_PRODUCER_EPOCH.
- new epoch (or unknown producer): the first sequence must be 0; otherwise
  OUT_OF_ORDER_SEQUENCE_NUMBER for a known producer, UNKNOWN_PRODUCER_ID for an unknown one.
- same epoch: the first sequence must follow the last one (wrapping after 2**31-1);
  otherwise OUT_OF_ORDER_SEQUENCE_NUMBER.

The Log's appends go through ``prepare_append`` (checks, straight from the batch headers)
and ``commit_append`` (once the offsets are known): one pass over the headers, and objects
only for the last five batches of each producer, the ones the state keeps. ``check`` and
``update`` apply the same rules to ProducerBatch objects (one object per batch: for
callers holding a few batches, and as the reference the header path is tested against).

Transactions: the first offset of each producer's open transaction (``ongoing``) is
noted at its first transactional batch and dropped by the marker that ends it
(``complete_txn``). The ended transaction stays unstable until the high watermark passes
its marker (``unreplicated``, Kafka's ``unreplicatedTxns``: a leader that dies before its
followers have the marker hands over a log where the transaction is still open, and the
last stable offset must not have moved past its start meanwhile);
``on_high_watermark_updated`` drops it then. The smallest first offset among both is the
partition's first unstable offset, below which the last stable offset stays. Each
producer also keeps the coordinator epoch of
the last marker written for it (Kafka's ``ProducerStateEntry.coordinatorEpoch``, what
DescribeProducers reports): leader, follower and recovery appends all note it through
``complete_txn``, and the snapshot keeps it.

Thread affinity: the owning Log calls it under its lock.
"""

from __future__ import annotations

import os
import re
import struct
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from pykfk.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from pykfk._core.records import BatchHeader

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_COORDINATOR_EPOCH = -1
INT32_MAX = 2**31 - 1
# Attributes bit 5 of a magic-2 batch: a control batch (transaction marker).
CONTROL_FLAG = 0x20
# Attributes bit 4: the batch belongs to a transaction.
TRANSACTIONAL_FLAG = 0x10

# Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the largest
# max.in.flight.requests.per.connection an idempotent producer may use.
NUM_BATCHES_TO_RETAIN = 5

SNAPSHOT_SUFFIX = ".snapshot"
# Version 2 adds each producer's open transaction, version 3 the coordinator epoch of
# its last marker (version 1 and 2 files are still read).
SNAPSHOT_VERSION = 3
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequence numbers wrap from 2**31-1 to 0 (Kafka DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class BatchMetadata(NamedTuple):
    """Sequence and offset range of one batch a producer wrote. (A named tuple: one is
    made per kept batch on every idempotent append, and it is the cheapest to make.)"""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerBatch:
    """The producer fields of one batch, as the log sees it before and after offsets are
    assigned (first_offset/last_offset are -1 before)."""

    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    timestamp: int
    first_offset: int = -1
    last_offset: int = -1
    is_control: bool = False

    @classmethod
    def from_header(cls, header: BatchHeader, first_offset: int = -1) -> ProducerBatch:
        """From a pykfk._core.records.BatchHeader; ``first_offset`` overrides the header's
        base_offset (used before offsets are written into the buffer)."""
        base = header.base_offset if first_offset < 0 else first_offset
        delta = header.last_offset_delta
        return cls(
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            first_seq=header.base_sequence,
            last_seq=increment_sequence(header.base_sequence, delta)
            if header.base_sequence >= 0 else NO_SEQUENCE,
            timestamp=header.max_timestamp,
            first_offset=base,
            last_offset=base + delta,
            is_control=header.is_control,
        )


class ProducerStateEntry:
    """What the log knows about one producer id."""

    __slots__ = ("batches", "coordinator_epoch", "last_timestamp", "producer_epoch", "producer_id")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH,
                 batches: Iterable[BatchMetadata] = (), last_timestamp: int = -1,
                 coordinator_epoch: int = NO_COORDINATOR_EPOCH):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)
        self.last_timestamp = last_timestamp
        # The coordinator epoch of the last transaction marker written for this producer.
        self.coordinator_epoch = coordinator_epoch

    # BatchMetadata fields by position below: an index is cheaper than a named field, and
    # these run on every idempotent append.

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else NO_SEQUENCE  # last_seq

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, producer_epoch: int, first_seq: int,
                       last_seq: int) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch or first_seq < 0:
            return None  # (a coordinator's batches carry no sequence: never duplicates)
        for batch in self.batches:
            if batch[1] == last_seq and batch[0] == first_seq:  # last_seq, first_seq
                return batch
        return None

    def add(self, batch: ProducerBatch) -> None:
        if batch.producer_epoch != self.producer_epoch:
            # A new epoch starts a new sequence: the old batches can no longer be retried.
            self.producer_epoch = batch.producer_epoch
            self.batches.clear()
        self.batches.append(BatchMetadata(batch.first_seq, batch.last_seq, batch.first_offset,
                                          batch.last_offset, batch.timestamp))
        self.last_timestamp = max(self.last_timestamp, batch.timestamp)

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, "
                f"producer_epoch={self.producer_epoch}, batches={list(self.batches)})")


def _check_sequence(pid: int, epoch: int, first_seq: int, current_epoch: int,
                    last_seq: int) -> None:
    """One batch against the producer's epoch and last sequence (module docstring rules)."""
    if first_seq == NO_SEQUENCE and epoch >= current_epoch:
        return  # a coordinator's transactional offsets: the epoch is all there is to check
    if epoch == current_epoch:
        if first_seq == last_seq + 1 or (first_seq == 0 and last_seq == INT32_MAX):
            return
        raise KafkaError(
            ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {last_seq}")
    if epoch < current_epoch:
        raise KafkaError(
            ErrorCode.INVALID_PRODUCER_EPOCH,
            f"producer {pid} epoch {epoch} is older than the current epoch {current_epoch}")
    if first_seq != 0:
        if current_epoch != NO_PRODUCER_EPOCH:
            raise KafkaError(
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {pid} starts epoch {epoch} at sequence {first_seq}, expected 0")
        raise KafkaError(
            ErrorCode.UNKNOWN_PRODUCER_ID,
            f"producer {pid} is unknown to this partition and its first sequence "
            f"is {first_seq}, not 0")


class _PendingProducer:
    """One producer's batches in an append: its epoch and last sequence after each batch
    (for the checks), its largest timestamp, and the header indexes of its batches since
    its epoch last changed (the state keeps the last five)."""

    __slots__ = ("epoch", "epoch_changed", "kept", "last_seq", "max_timestamp")

    def __init__(self, epoch: int, last_seq: int):
        self.epoch = epoch
        self.last_seq = last_seq
        self.max_timestamp = -1
        self.epoch_changed = False
        self.kept: list[int] = []

    def add(self, index: int, header: Any) -> None:
        if header.producer_epoch != self.epoch:
            # A new epoch starts a new sequence: the old batches can no longer be retried.
            self.epoch = header.producer_epoch
            self.epoch_changed = True
            self.kept.clear()
        self.last_seq = _last_sequence(header)
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        self.kept.append(index)


def _last_sequence(header: Any) -> int:
    """Sequence of a batch's last record (wrapping after 2**31-1), -1 without sequences."""
    if header.base_sequence < 0:
        return NO_SEQUENCE
    return increment_sequence(header.base_sequence, header.last_offset_delta)


class PendingAppend:
    """What ``prepare_append`` found: the producers of an append (producer id ->
    their batches) or the original of a duplicate batch."""

    __slots__ = ("duplicate", "producers")

    def __init__(self) -> None:
        self.producers: dict[int, _PendingProducer] = {}
        self.duplicate: BatchMetadata | None = None


def _leader_base_offsets(kept: list[tuple[int, _PendingProducer, list[int]]],
                         headers: Sequence[Any], next_offset: int) -> dict[int, int]:
    """Base offsets of the batches from the first kept one (``kept``: producer id, pending
    producer, kept header indexes) on, by header index, when the batches follow each other
    without gaps up to ``next_offset`` (a leader's). Counting back from the end visits only
    those batches: in the common case the last five."""
    offset = next_offset
    out = {}
    for i in range(len(headers) - 1, min(k[2][0] for k in kept) - 1, -1):
        offset -= headers[i].last_offset_delta + 1
        out[i] = offset
    return out


class SnapshotError(ValueError):
    """A producer snapshot file that is truncated, corrupt or of an unknown version."""


class ProducerStateManager:
    """Producer entries of one partition plus the offset up to which they reflect the log
    (``map_end_offset``)."""

    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0
        # producer id -> first offset of its open transaction in this partition
        self.ongoing: dict[int, int] = {}
        # (marker offset, first offset) of the ended transactions whose marker the high
        # watermark has not passed yet, in marker order
        self.unreplicated: deque[tuple[int, int]] = deque()

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction that is open or whose marker is
        not below the high watermark yet; None when there is none."""
        ongoing, unreplicated = self.ongoing, self.unreplicated
        if not unreplicated:
            return min(ongoing.values()) if ongoing else None
        # (a copy: the log cleaner reads this from its own thread)
        first = min(txn_first for _marker, txn_first in tuple(unreplicated))
        return min(first, min(ongoing.values())) if ongoing else first

    def first_ongoing_offset(self) -> int | None:
        """The first offset of the earliest open transaction; None when none is open."""
        ongoing = self.ongoing
        return min(ongoing.values()) if ongoing else None

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Ended transactions whose marker is below ``high_watermark`` are stable now
        (Kafka's ``ProducerStateManager.onHighWatermarkUpdated``)."""
        unreplicated = self.unreplicated
        while unreplicated and unreplicated[0][0] < high_watermark:
            unreplicated.popleft()

    def check_marker(self, producer_id: int, producer_epoch: int) -> None:
        """A coordinator's marker may not come from an epoch older than the producer's
        (Kafka answers INVALID_PRODUCER_EPOCH: a newer producer took over meanwhile)."""
        entry = self.producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise KafkaError(ErrorCode.INVALID_PRODUCER_EPOCH,
                             f"marker of producer {producer_id} at epoch {producer_epoch}, "
                             f"older than the current epoch {entry.producer_epoch}")

    def complete_txn(self, producer_id: int, producer_epoch: int, marker_offset: int,
                     timestamp: int, coordinator_epoch: int = NO_COORDINATOR_EPOCH) -> int | None:
        """The marker at ``marker_offset``, written by the transaction coordinator of
        ``coordinator_epoch``, ends the producer's transaction here: returns the first
        offset it had (None when it wrote nothing to this partition). The transaction
        stays unstable until ``on_high_watermark_updated`` passes the marker. A marker of
        a newer epoch (the coordinator fencing a producer) moves the producer to it."""
        first = self.ongoing.pop(producer_id, None)
        if first is not None:
            self.unreplicated.append((marker_offset, first))
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if producer_epoch > entry.producer_epoch:
            entry.producer_epoch = producer_epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        if coordinator_epoch != NO_COORDINATOR_EPOCH:
            entry.coordinator_epoch = coordinator_epoch
        self.map_end_offset = max(self.map_end_offset, marker_offset + 1)
        return first

    def check(self, batches: Iterable[ProducerBatch]) -> BatchMetadata | None:
        """Validates a client append against the known state without changing it.

        Returns the original metadata when a batch is a duplicate of one of the last
        five (the caller then appends nothing); raises KafkaError on an epoch or sequence
        violation. Several batches of the same producer in one append are checked against
        each other.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer_id -> (epoch, last_seq)
        for batch in batches:
            if batch.producer_id < 0 or batch.is_control:
                continue
            entry = self.producers.get(batch.producer_id)
            if entry is not None and batch.producer_id not in pending:
                duplicate = entry.find_duplicate(batch.producer_epoch, batch.first_seq,
                                                 batch.last_seq)
                if duplicate is not None:
                    return duplicate
            if batch.producer_id in pending:
                current_epoch, last_seq = pending[batch.producer_id]
            elif entry is not None:
                current_epoch, last_seq = entry.producer_epoch, entry.last_seq
            else:
                current_epoch, last_seq = NO_PRODUCER_EPOCH, NO_SEQUENCE
            self._check_one(batch, current_epoch, last_seq)
            pending[batch.producer_id] = (batch.producer_epoch, batch.last_seq)
        return None

    @staticmethod
    def _check_one(batch: ProducerBatch, current_epoch: int, last_seq: int) -> None:
        _check_sequence(batch.producer_id, batch.producer_epoch, batch.first_seq,
                        current_epoch, last_seq)

    def update(self, batches: Iterable[ProducerBatch]) -> None:
        """Records batches that are now in the log (offsets assigned). No checks: also
        used for follower appends and for replaying the log on open."""
        for batch in batches:
            if batch.last_offset >= self.map_end_offset:
                self.map_end_offset = batch.last_offset + 1
            if batch.producer_id < 0 or batch.is_control:
                continue
            entry = self.producers.get(batch.producer_id)
            if entry is None:
                entry = self.producers[batch.producer_id] = ProducerStateEntry(batch.producer_id)
            entry.add(batch)

    def prepare_append(self, headers: Sequence[Any], *, check: bool) -> PendingAppend:
        """Reads the producer batches among ``headers`` (pykfk._core.records.BatchHeader,
        in log order) in one pass: the same rules as ``check`` when ``check`` is set
        (raises KafkaError; a duplicate ends the pass and is returned in
        ``PendingAppend.duplicate``), and what ``commit_append`` needs. Changes nothing."""
        if len(headers) == 1:
            return self._prepare_one(headers[0], check)
        pending = PendingAppend()
        producers = pending.producers
        current_pid, current = None, None
        for index, h in enumerate(headers):
            pid = h.producer_id
            if pid < 0 or h.attributes & CONTROL_FLAG:
                continue
            if pid != current_pid:
                current_pid, current = pid, producers.get(pid)
                if current is None:
                    entry = self.producers.get(pid)
                    if check and entry is not None:
                        duplicate = entry.find_duplicate(
                            h.producer_epoch, h.base_sequence, _last_sequence(h))
                        if duplicate is not None:
                            pending.duplicate = duplicate
                            return pending
                    current = producers[pid] = (
                        _PendingProducer(NO_PRODUCER_EPOCH, NO_SEQUENCE) if entry is None
                        else _PendingProducer(entry.producer_epoch, entry.last_seq))
            assert current is not None  # looked up or created when the producer changed
            first_seq = h.base_sequence
            if h.producer_epoch == current.epoch and first_seq == current.last_seq + 1:
                # The common case, inline: same epoch, next sequence (not wrapping to 0).
                last_seq = first_seq + h.last_offset_delta
                current.last_seq = last_seq if last_seq <= INT32_MAX else last_seq - INT32_MAX - 1
                timestamp = h.max_timestamp
                if timestamp > current.max_timestamp:  # noqa: PLR1730 (a max() call costs more)
                    current.max_timestamp = timestamp
                current.kept.append(index)
                continue
            if check:
                _check_sequence(pid, h.producer_epoch, first_seq, current.epoch,
                                current.last_seq)
            current.add(index, h)
        return pending

    def _prepare_one(self, h: Any, check: bool) -> PendingAppend:
        """``prepare_append`` of one batch (a producer that sends one batch per request):
        the same steps without the loop."""
        pending = PendingAppend()
        pid = h.producer_id
        if pid < 0 or h.attributes & CONTROL_FLAG:
            return pending
        entry = self.producers.get(pid)
        epoch = h.producer_epoch
        first_seq = h.base_sequence
        if entry is None:
            current = _PendingProducer(NO_PRODUCER_EPOCH, NO_SEQUENCE)
        else:
            entry_epoch, entry_last_seq = entry.producer_epoch, entry.last_seq
            # The next batch in sequence (the common case) cannot be a duplicate: every
            # kept batch of this epoch ends at or before the last sequence.
            if check and (epoch != entry_epoch or first_seq != entry_last_seq + 1):
                duplicate = entry.find_duplicate(epoch, first_seq, _last_sequence(h))
                if duplicate is not None:
                    pending.duplicate = duplicate
                    return pending
            current = _PendingProducer(entry_epoch, entry_last_seq)
        pending.producers[pid] = current
        if epoch == current.epoch and first_seq == current.last_seq + 1:
            last_seq = first_seq + h.last_offset_delta
            current.last_seq = last_seq if last_seq <= INT32_MAX else last_seq - INT32_MAX - 1
            current.max_timestamp = max(current.max_timestamp, h.max_timestamp)
            current.kept.append(0)
            return pending
        if check:
            _check_sequence(pid, epoch, first_seq, current.epoch, current.last_seq)
        current.add(0, h)
        return pending

    def commit_append(self, pending: PendingAppend | None, headers: Sequence[Any],
                      next_offset: int, *, offsets_assigned: bool) -> None:
        """Records a prepared append that is now in the log, ending at ``next_offset``
        (``pending`` None: no batch of it carries a producer id).
        ``offsets_assigned``: a leader gave the batches offsets running on without gaps up
        to ``next_offset`` (their header objects still hold the producer's); otherwise the
        headers hold the final offsets (a follower)."""
        self.map_end_offset = max(self.map_end_offset, next_offset)
        if pending is None or not pending.producers:
            return
        if len(headers) == 1:
            self._commit_one(pending, headers[0], next_offset, offsets_assigned)
            return
        kept = [(pid, p, p.kept[-NUM_BATCHES_TO_RETAIN:])
                for pid, p in pending.producers.items()]
        base_offsets = (_leader_base_offsets(kept, headers, next_offset) if offsets_assigned
                        else None)
        for pid, p, indexes in kept:
            entry = self.producers.get(pid)
            if entry is None:
                entry = self.producers[pid] = ProducerStateEntry(pid)
            if p.epoch_changed:
                entry.producer_epoch = p.epoch
                entry.batches.clear()
            for index in indexes:
                h = headers[index]
                base = h.base_offset if base_offsets is None else base_offsets[index]
                entry.batches.append(BatchMetadata(h.base_sequence, _last_sequence(h), base,
                                                   base + h.last_offset_delta, h.max_timestamp))
            entry.last_timestamp = max(entry.last_timestamp, p.max_timestamp)
            if pid not in self.ongoing:
                self._note_transaction_start(pid, headers, next_offset, offsets_assigned)

    def _note_transaction_start(self, pid: int, headers: Sequence[Any], next_offset: int,
                                offsets_assigned: bool) -> None:
        """The producer's first transactional batch among ``headers`` opens its
        transaction here (several batches in one append: v0-2 Produce or a follower)."""
        for index, h in enumerate(headers):
            if h.producer_id == pid and h.attributes & TRANSACTIONAL_FLAG \
                    and not h.attributes & CONTROL_FLAG:
                if offsets_assigned:
                    base = next_offset - sum(later.last_offset_delta + 1 for later in headers[index:])
                else:
                    base = h.base_offset
                self.ongoing[pid] = base
                return

    def _commit_one(self, pending: PendingAppend, h: Any, next_offset: int,
                    offsets_assigned: bool) -> None:
        """``commit_append`` of one producer batch: the same steps without the loops."""
        ((pid, p),) = pending.producers.items()
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerStateEntry(pid)
        if p.epoch_changed:
            entry.producer_epoch = p.epoch
            entry.batches.clear()
        delta = h.last_offset_delta
        base = next_offset - delta - 1 if offsets_assigned else h.base_offset
        entry.batches.append(BatchMetadata(h.base_sequence, _last_sequence(h), base,
                                           base + delta, h.max_timestamp))
        entry.last_timestamp = max(entry.last_timestamp, p.max_timestamp)
        if h.attributes & TRANSACTIONAL_FLAG and pid not in self.ongoing:
            self.ongoing[pid] = base

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def truncate(self) -> None:
        """Forget everything (before a rebuild after the log was truncated)."""
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.map_end_offset = 0

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Drops producers that wrote nothing for ``expiration_ms`` (Kafka's
        producer.id.expiration.ms), so the table cannot grow without bound."""
        expired = [pid for pid, entry in self.producers.items()
                   if now_ms - entry.last_timestamp > expiration_ms and pid not in self.ongoing]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    # Snapshot file <20-digit offset>.snapshot: the state as of that offset (the log end
    # offset when it was taken). Big-endian:
    #
    #   offset size  field
    #    0     2     version (3; 1 and 2 are read)
    #    2     4     crc: CRC-32C of every byte after this field
    #    6     4     producer count
    #   10     ...   producers, each:
    #                  8 producer_id, 2 producer_epoch, 8 last_timestamp,
    #                  8 first offset of its open transaction (-1 none; versions 2 and 3),
    #                  4 coordinator epoch of its last marker (-1 none; version 3),
    #                  1 batch count (0..5)
    #                  then per batch: 4 first_seq, 4 last_seq, 8 first_offset, 8 last_offset,
    #                  8 timestamp
    #
    # Kafka's own snapshot keeps only the last batch of each producer; this one keeps all
    # five so duplicates of any in-flight batch are still caught after a restart.

    _HEAD = struct.Struct(">hIi")
    _PRODUCER = struct.Struct(">qhqqiB")
    _PRODUCER_V2 = struct.Struct(">qhqqB")
    _PRODUCER_V1 = struct.Struct(">qhqB")
    _BATCH = struct.Struct(">iiqqq")

    def snapshot_bytes(self) -> bytes:
        from pykfk._core import crc32c

        parts = [struct.pack(">i", len(self.producers))]
        for pid, entry in sorted(self.producers.items()):
            parts.append(self._PRODUCER.pack(pid, entry.producer_epoch, entry.last_timestamp,
                                             self.ongoing.get(pid, -1), entry.coordinator_epoch,
                                             len(entry.batches)))
            for b in entry.batches:
                parts.append(self._BATCH.pack(b.first_seq, b.last_seq, b.first_offset,
                                              b.last_offset, b.timestamp))
        body = b"".join(parts)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body

    def load_snapshot_bytes(self, data: bytes, offset: int) -> None:
        """Replaces the state with a snapshot's; raises SnapshotError (state unchanged)."""
        from pykfk._core import crc32c

        if len(data) < self._HEAD.size:
            raise SnapshotError(f"snapshot of {len(data)} bytes is shorter than its header")
        version, crc, count = self._HEAD.unpack_from(data, 0)
        layout = {1: self._PRODUCER_V1, 2: self._PRODUCER_V2, SNAPSHOT_VERSION: self._PRODUCER}.get(version)
        if layout is None:
            raise SnapshotError(f"unknown snapshot version {version}")
        if crc32c(memoryview(data)[6:]) != crc:
            raise SnapshotError("snapshot CRC mismatch")
        producers: dict[int, ProducerStateEntry] = {}
        ongoing: dict[int, int] = {}
        pos = self._HEAD.size
        for _ in range(max(count, 0)):
            if pos + layout.size > len(data):
                raise SnapshotError("snapshot truncated inside a producer entry")
            coordinator_epoch = NO_COORDINATOR_EPOCH
            if version == SNAPSHOT_VERSION:
                pid, epoch, last_ts, txn_first, coordinator_epoch, n = layout.unpack_from(data, pos)
            elif version == 2:
                pid, epoch, last_ts, txn_first, n = layout.unpack_from(data, pos)
            else:
                pid, epoch, last_ts, n = layout.unpack_from(data, pos)
                txn_first = -1
            if txn_first >= 0:
                ongoing[pid] = txn_first
            pos += layout.size
            if n > NUM_BATCHES_TO_RETAIN or pos + n * self._BATCH.size > len(data):
                raise SnapshotError(f"snapshot entry of producer {pid} is malformed")
            batches = [BatchMetadata(*self._BATCH.unpack_from(data, pos + i * self._BATCH.size))
                       for i in range(n)]
            pos += n * self._BATCH.size
            producers[pid] = ProducerStateEntry(pid, epoch, batches, last_ts, coordinator_epoch)
        if pos != len(data):
            raise SnapshotError(f"{len(data) - pos} unexpected bytes after the last entry")
        self.producers = producers
        self.ongoing = ongoing
        self.unreplicated.clear()
        self.map_end_offset = offset


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def list_snapshots(directory: str) -> list[int]:
    """Offsets of the snapshot files in ``directory``, ascending."""
    offsets = []
    for name in os.listdir(directory):
        match = _SNAPSHOT_NAME.match(name)
        if match:
            offsets.append(int(match.group(1)))
    return sorted(offsets)
