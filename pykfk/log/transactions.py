"""Transactions in a partition's log: markers, the aborted-transactions index, the last
stable offset (apache/kafka ``TransactionIndex``, ``AbortedTxn``, ``EndTransactionMarker``).

A transactional producer's batches carry the transactional attribute (bit 4); the
transaction ends in each partition with a control batch (bit 5) that only the broker
writes, holding one record whose key says COMMIT or ABORT::

    control record key    version int16 (0), type int16 (0 = ABORT, 1 = COMMIT)
    control record value  version int16 (0), coordinator_epoch int32

Each aborted transaction is remembered as (producer id, first offset, last offset = the
marker's offset, last stable offset after it) so a read_committed Fetch can tell the
consumer which of the batches it gets to drop. They are kept per segment in
``<base offset>.txnindex`` (Kafka's file: entries of 34 bytes, big-endian, no header)::

    offset size  field
     0     2     version (0)
     2     8     producer_id
    10     8     first_offset
    18     8     last_offset          (the ABORT marker)
    26     8     last_stable_offset

The files are derived data, written when a marker is appended (no fsync: a process crash
keeps them; recovery replays the batches after the last producer snapshot and adds what
is missing). Offsets past the log end (a truncated tail) are dropped when loading. The log
cleaner drops the entry of an aborted transaction together with its marker
(``pykfk.log.cleaner``).
"""

from __future__ import annotations

import bisect
import os
import struct
from collections.abc import Iterable
from typing import Any, NamedTuple

from pykfk._core import records as core_records

TXN_INDEX_SUFFIX = ".txnindex"
TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")

# Control record types (Kafka's ControlRecordType).
ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
CONTROL_VALUE_VERSION = 0
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


class AbortedTxn(NamedTuple):
    """One aborted transaction of a producer in this partition."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def marker_batch(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    """The control batch ending a transaction (offsets assigned by the append)."""
    key = _CONTROL_KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)
    value = _CONTROL_VALUE.pack(CONTROL_VALUE_VERSION, coordinator_epoch)
    return core_records.build_batch([(key, value, timestamp_ms, ())], producer_id=producer_id,
                                    producer_epoch=producer_epoch, is_transactional=True,
                                    is_control=True)


def read_marker(batch: Any) -> tuple[int, int] | None:
    """(COMMIT or ABORT, coordinator epoch) of a whole control batch's bytes; None when
    its record does not carry a control key this broker knows (Kafka ignores unknown
    control types). The epoch is -1 when the record has no readable value."""
    for record in core_records.iter_records(batch):
        key = record.key
        if key is not None and len(key) >= _CONTROL_KEY.size:
            _version, kind = _CONTROL_KEY.unpack_from(key)
            if kind in (ABORT, COMMIT):
                value = record.value
                epoch = -1
                if value is not None and len(value) >= _CONTROL_VALUE.size:
                    _value_version, epoch = _CONTROL_VALUE.unpack_from(value)
                return int(kind), int(epoch)
        return None
    return None


def marker_type(batch: Any) -> int | None:
    """COMMIT or ABORT for a whole control batch's bytes; None when its record does not
    carry a control key this broker knows (Kafka ignores unknown control types)."""
    marker = read_marker(batch)
    return None if marker is None else marker[0]


def control_marker_records(buf: Any, headers: Iterable[Any]) -> list[tuple[Any, int, int]]:
    """(header, COMMIT or ABORT, coordinator epoch) of every control batch among
    ``headers``, the batches lying one after the other in ``buf`` (an append's bytes)."""
    found = []
    position = 0
    for header in headers:
        size = header.size
        if header.attributes & core_records.ATTR_CONTROL:
            marker = read_marker(buf[position:position + size])
            if marker is not None:
                found.append((header, marker[0], marker[1]))
        position += size
    return found


def control_markers(buf: Any, headers: Iterable[Any]) -> list[tuple[Any, int]]:
    """(header, COMMIT or ABORT) of every control batch among ``headers``."""
    return [(header, kind) for header, kind, _epoch in control_marker_records(buf, headers)]


class AbortedTransactions:
    """The aborted transactions of one log, ordered by marker offset, and their
    ``.txnindex`` files in the log's directory. Called under the owning log's lock."""

    def __init__(self, directory: str):
        self.directory = directory
        self._entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def path(self, segment_base: int) -> str:
        return os.path.join(self.directory, f"{segment_base:020d}{TXN_INDEX_SUFFIX}")

    def load(self, segment_bases: list[int], log_end_offset: int) -> None:
        """Reads the index files of the live segments; entries at or past the log end
        (a truncated tail) are dropped and their files rewritten."""
        entries: list[AbortedTxn] = []
        for base in segment_bases:
            path = self.path(base)
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            whole = len(data) - len(data) % _ENTRY.size
            kept = [AbortedTxn(*_ENTRY.unpack_from(data, pos)[1:])
                    for pos in range(0, whole, _ENTRY.size)
                    if _ENTRY.unpack_from(data, pos)[0] == TXN_INDEX_VERSION]
            valid = [e for e in kept if e.last_offset < log_end_offset]
            if len(valid) != len(kept) or whole != len(data):
                self._rewrite(path, valid)
            entries.extend(valid)
        entries.sort(key=lambda e: e.last_offset)
        self._entries = entries
        self._last_offsets = [e.last_offset for e in entries]

    def add(self, entry: AbortedTxn, segment_base: int) -> None:
        """Records an abort whose marker was just appended (or found again by recovery:
        an entry already known is not added twice)."""
        i = bisect.bisect_left(self._last_offsets, entry.last_offset)
        if i < len(self._entries) and self._last_offsets[i] == entry.last_offset:
            return
        self._entries.insert(i, entry)
        self._last_offsets.insert(i, entry.last_offset)
        with open(self.path(segment_base), "ab") as f:
            f.write(_ENTRY.pack(TXN_INDEX_VERSION, *entry))

    def in_range(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, end): those a read of that range may
        return data of (their marker at or after ``start``, their first batch before
        ``end``)."""
        i = bisect.bisect_left(self._last_offsets, start)
        return [e for e in self._entries[i:] if e.first_offset < end]

    def truncate(self, log_end_offset: int, segment_bases: list[int]) -> None:
        """Drops the entries at or past ``log_end_offset`` and rewrites the files of the
        remaining segments that held some."""
        i = bisect.bisect_left(self._last_offsets, log_end_offset)
        if i == len(self._entries):
            return
        self._entries, self._last_offsets = self._entries[:i], self._last_offsets[:i]
        for base in segment_bases:
            path = self.path(base)
            if os.path.exists(path):
                self._rewrite(path, [e for e in self._read(path) if e.last_offset < log_end_offset])

    def drop_before(self, offset: int) -> None:
        """Forgets transactions wholly below ``offset`` (the log start moved past them)."""
        i = bisect.bisect_left(self._last_offsets, offset)
        if i:
            self._entries, self._last_offsets = self._entries[i:], self._last_offsets[i:]

    def remove(self, last_offsets: Iterable[int]) -> None:
        """Forgets the transactions whose markers (at ``last_offsets``) the log cleaner
        removed; the caller rewrites the index file of the segment that held them."""
        gone = set(last_offsets)
        if gone:
            self._entries = [e for e in self._entries if e.last_offset not in gone]
            self._last_offsets = [e.last_offset for e in self._entries]

    def rewrite_segment(self, segment_base: int, next_offset: int) -> None:
        """Writes the index file of a segment that replaced others (compaction) from the
        entries of its offset range."""
        self._rewrite(self.path(segment_base),
                      [e for e in self._entries if segment_base <= e.last_offset < next_offset])

    def _read(self, path: str) -> list[AbortedTxn]:
        with open(path, "rb") as f:
            data = f.read()
        return [AbortedTxn(*_ENTRY.unpack_from(data, pos)[1:])
                for pos in range(0, len(data) - len(data) % _ENTRY.size, _ENTRY.size)]

    @staticmethod
    def _rewrite(path: str, entries: list[AbortedTxn]) -> None:
        if not entries:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"".join(_ENTRY.pack(TXN_INDEX_VERSION, *e) for e in entries))
        os.replace(tmp, path)
