"""One share-partition's delivery state (KIP-932), as Kafka's SharePartition keeps it.

Records below the share-partition start offset (SPSO) are done with; records from the
share-partition end offset (SPEO) on were never handed out. In between lie the in-flight
records, kept as ranges of offsets that share one state, delivery count, owner and lock
deadline; a range acknowledged in part is split at the offsets whose state changed.

A record is AVAILABLE (may be handed out), ACQUIRED (locked to one member until it
acknowledges or its lock expires), ACKNOWLEDGED (accepted) or ARCHIVED (rejected, a gap,
aborted, or released at the delivery count limit). When the lowest ranges are
ACKNOWLEDGED or ARCHIVED the SPSO moves past them. Pure logic: time comes in as ``now_ms``.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pykfk.errors import ErrorCode


class RecordState(enum.IntEnum):
    """Kafka's RecordState values (they are persisted in ``__share_group_state``)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(enum.IntEnum):
    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


@dataclass(frozen=True)
class SharePartitionSettings:
    lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_in_flight: int = 2000


@dataclass
class InFlight:
    """Offsets ``first``..``last`` sharing one state."""

    first: int
    last: int
    state: RecordState
    delivery_count: int = 0
    member_id: str | None = None
    deadline_ms: int = 0

    def copy(self, first: int, last: int) -> InFlight:
        return InFlight(first, last, self.state, self.delivery_count, self.member_id, self.deadline_ms)


@dataclass(frozen=True)
class Acquired:
    """What ShareFetch reports as AcquiredRecords."""

    first: int
    last: int
    delivery_count: int


@dataclass(frozen=True)
class AckBatch:
    """One AcknowledgementBatch: one type for the whole range, or one per offset."""

    first: int
    last: int
    types: Sequence[int]


@dataclass
class PartitionCounters:
    acquired: int = 0
    acknowledged: int = 0
    released: int = 0
    archived: int = 0
    redelivered: int = 0


@dataclass
class SharePartition:
    start_offset: int
    settings: SharePartitionSettings = field(default_factory=SharePartitionSettings)
    state_epoch: int = 0
    # The leader epoch of the topic partition when this state was loaded: a state of an
    # older leadership is stale (loaded again from the share coordinator).
    leader_epoch: int = -1
    ranges: list[InFlight] = field(default_factory=list)
    counters: PartitionCounters = field(default_factory=PartitionCounters)

    @property
    def end_offset(self) -> int:
        """SPEO: the next offset never handed out."""
        return self.ranges[-1].last + 1 if self.ranges else self.start_offset

    @property
    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    # -- acquisition -----------------------------------------------------------------

    def acquire(self, member_id: str, available_end: int, max_records: int, now_ms: int,
                aborted: Sequence[tuple[int, int]] = ()) -> list[Acquired]:
        """Lock up to ``max_records`` offsets below ``available_end`` to ``member_id``:
        first those released again (redeliveries, lowest first), then new ones from the
        SPEO while fewer than ``max_in_flight`` are in flight. New offsets inside an
        ``aborted`` range (read_committed over an aborted transaction) are archived,
        never handed out."""
        self.expire_locks(now_ms)
        deadline = now_ms + self.settings.lock_duration_ms
        out: list[Acquired] = []
        budget = max_records
        for index in range(len(self.ranges)):
            if budget <= 0:
                break
            item = self.ranges[index]
            if item.state != RecordState.AVAILABLE or item.first >= available_end:
                continue
            if item.last - item.first + 1 > budget:
                self._split(index, item.first + budget)
                item = self.ranges[index]
            item.state, item.member_id, item.deadline_ms = RecordState.ACQUIRED, member_id, deadline
            item.delivery_count += 1
            if item.delivery_count > 1:
                self.counters.redelivered += item.last - item.first + 1
            budget -= item.last - item.first + 1
            out.append(Acquired(item.first, item.last, item.delivery_count))
        start = self.end_offset
        room = self.settings.max_in_flight - self.in_flight
        end = min(available_end, start + min(budget, room))
        if end > start:
            out += self._acquire_new(member_id, start, end, deadline, aborted)
        self.counters.acquired += sum(a.last - a.first + 1 for a in out)
        self._merge_acquired(out)
        self._advance()
        return out

    def _acquire_new(self, member_id: str, start: int, end: int, deadline: int,
                     aborted: Sequence[tuple[int, int]]) -> list[Acquired]:
        out: list[Acquired] = []
        offset = start
        for first, last in sorted(aborted):
            if last < offset or first >= end:
                continue
            if first > offset:
                out.append(self._append_acquired(member_id, offset, first - 1, deadline))
            cut = min(last, end - 1)
            self.ranges.append(InFlight(max(first, offset), cut, RecordState.ARCHIVED))
            self.counters.archived += cut - max(first, offset) + 1
            offset = cut + 1
        if offset < end:
            out.append(self._append_acquired(member_id, offset, end - 1, deadline))
        return out

    def _append_acquired(self, member_id: str, first: int, last: int, deadline: int) -> Acquired:
        self.ranges.append(InFlight(first, last, RecordState.ACQUIRED, 1, member_id, deadline))
        return Acquired(first, last, 1)

    @staticmethod
    def _merge_acquired(out: list[Acquired]) -> None:
        """Neighbouring ranges of one delivery count report as one."""
        merged: list[Acquired] = []
        for item in out:
            if merged and merged[-1].last + 1 == item.first and merged[-1].delivery_count == item.delivery_count:
                merged[-1] = Acquired(merged[-1].first, item.last, item.delivery_count)
            else:
                merged.append(item)
        out[:] = merged

    # -- acknowledgement -------------------------------------------------------------

    def acknowledge(self, member_id: str, batches: Iterable[AckBatch]) -> int:
        """Apply a member's acknowledgements, all or none: INVALID_REQUEST for a bad
        range or type, INVALID_RECORD_STATE when an offset is not acquired by
        ``member_id``."""
        batches = sorted(batches, key=lambda b: b.first)
        previous_last = -1
        for batch in batches:
            count = batch.last - batch.first + 1
            if batch.first < 0 or count <= 0 or batch.first <= previous_last:
                return ErrorCode.INVALID_REQUEST
            if len(batch.types) not in (1, count) or any(t not in (0, 1, 2, 3) for t in batch.types):
                return ErrorCode.INVALID_REQUEST
            previous_last = batch.last
            if not self._held_by(member_id, batch.first, batch.last):
                return ErrorCode.INVALID_RECORD_STATE
        for batch in batches:
            if len(batch.types) == 1:
                self._settle(batch.first, batch.last, AcknowledgeType(batch.types[0]))
            else:
                for offset, ack in zip(range(batch.first, batch.last + 1), batch.types, strict=True):
                    self._settle(offset, offset, AcknowledgeType(ack))
        self._advance()
        return ErrorCode.NONE

    def _held_by(self, member_id: str, first: int, last: int) -> bool:
        if first < self.start_offset or last >= self.end_offset:
            return False
        index = self._index_of(first)
        offset = first
        while offset <= last:
            if index < 0 or index >= len(self.ranges):
                return False
            item = self.ranges[index]
            if (item.first > offset or item.state != RecordState.ACQUIRED
                    or item.member_id != member_id):
                return False
            offset = item.last + 1
            index += 1
        return True

    def _settle(self, first: int, last: int, ack: AcknowledgeType) -> None:
        for item in self._isolate(first, last):
            if ack == AcknowledgeType.ACCEPT:
                self._set(item, RecordState.ACKNOWLEDGED)
            elif ack == AcknowledgeType.RELEASE:
                self._release(item)
            else:  # REJECT and GAP: never delivered again
                self._set(item, RecordState.ARCHIVED)

    def _release(self, item: InFlight) -> None:
        """Back to AVAILABLE, or ARCHIVED once delivered ``delivery_count_limit`` times."""
        if item.delivery_count >= self.settings.delivery_count_limit:
            self._set(item, RecordState.ARCHIVED)
        else:
            self.counters.released += item.last - item.first + 1
            item.state, item.member_id, item.deadline_ms = RecordState.AVAILABLE, None, 0

    def _set(self, item: InFlight, state: RecordState) -> None:
        count = item.last - item.first + 1
        if state == RecordState.ACKNOWLEDGED:
            self.counters.acknowledged += count
        elif state == RecordState.ARCHIVED:
            self.counters.archived += count
        item.state, item.member_id, item.deadline_ms = state, None, 0

    # -- locks and members -----------------------------------------------------------

    def expire_locks(self, now_ms: int) -> int:
        """Release every acquired range whose lock ran out; the offsets released."""
        released = 0
        for item in self.ranges:
            if item.state == RecordState.ACQUIRED and item.deadline_ms <= now_ms:
                released += item.last - item.first + 1
                self._release(item)
        if released:
            self._advance()
        return released

    def next_deadline_ms(self) -> int | None:
        deadlines = [i.deadline_ms for i in self.ranges if i.state == RecordState.ACQUIRED]
        return min(deadlines) if deadlines else None

    def release_member(self, member_id: str) -> int:
        """A member left or was fenced: what it held is released."""
        released = 0
        for item in self.ranges:
            if item.state == RecordState.ACQUIRED and item.member_id == member_id:
                released += item.last - item.first + 1
                self._release(item)
        if released:
            self._advance()
        return released

    # -- offsets -----------------------------------------------------------------------

    def reset_start(self, offset: int) -> None:
        """Move the SPSO (log start moved past it, or an AlterShareGroupOffsets): the
        in-flight state below it is dropped."""
        self.ranges = [r for r in self.ranges if r.last >= offset]
        if self.ranges and self.ranges[0].first < offset:
            self.ranges[0] = self.ranges[0].copy(offset, self.ranges[0].last)
        self.start_offset = offset
        self._advance()

    def _advance(self) -> None:
        done = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)
        drop = 0
        while drop < len(self.ranges) and self.ranges[drop].state in done:
            drop += 1
        if drop:
            self.start_offset = self.ranges[drop - 1].last + 1
            del self.ranges[:drop]
        self._coalesce()

    def _coalesce(self) -> None:
        """Join neighbours of one settled state so the list stays short."""
        out: list[InFlight] = []
        for item in self.ranges:
            prev = out[-1] if out else None
            if (prev is not None and prev.last + 1 == item.first and prev.state == item.state
                    and item.state in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)):
                prev.last = item.last
            else:
                out.append(item)
        self.ranges = out

    def _index_of(self, offset: int) -> int:
        return bisect.bisect_right([r.first for r in self.ranges], offset) - 1

    def _split(self, index: int, at: int) -> None:
        item = self.ranges[index]
        self.ranges[index:index + 1] = [item.copy(item.first, at - 1), item.copy(at, item.last)]

    def _isolate(self, first: int, last: int) -> list[InFlight]:
        """The ranges covering exactly ``first``..``last`` (split where needed)."""
        index = self._index_of(first)
        if self.ranges[index].first < first:
            self._split(index, first)
            index += 1
        end = self._index_of(last)
        if self.ranges[end].last > last:
            self._split(end, last + 1)
        return self.ranges[index:end + 1]

    # -- persistence -------------------------------------------------------------------

    def state_batches(self) -> list[tuple[int, int, int, int]]:
        """(first, last, state, delivery count) of the in-flight ranges as Kafka's share
        coordinator stores them: acquired records are stored as AVAILABLE (a restart
        hands them out again), ranges never delivered again are left out."""
        out: list[tuple[int, int, int, int]] = []
        for item in self.ranges:
            state = RecordState.AVAILABLE if item.state == RecordState.ACQUIRED else item.state
            out.append((item.first, item.last, int(state), item.delivery_count))
        return out

    @classmethod
    def restored(cls, start_offset: int, state_epoch: int, batches: Iterable[tuple[int, int, int, int]],
                 settings: SharePartitionSettings, leader_epoch: int = -1) -> SharePartition:
        part = cls(start_offset, settings, state_epoch, leader_epoch)
        for first, last, state, count in sorted(batches):
            if last < start_offset:
                continue
            kept = RecordState(state) if state != RecordState.ACQUIRED else RecordState.AVAILABLE
            part.ranges.append(InFlight(max(first, start_offset), last, kept, count))
        part._advance()
        return part


def initial_start_offset(auto_offset_reset: str, log_start: int, log_end: int) -> int:
    """Where a share group starts on a partition it has no state for
    (``share.auto.offset.reset``: ``latest``, Kafka's default, or ``earliest``)."""
    return log_start if auto_offset_reset == "earliest" else log_end
