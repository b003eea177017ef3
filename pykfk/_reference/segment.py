"""Slow, obviously correct segment logic in pure Python: the test oracle for
pykfk._core.segment (index search, header walks, recovery scan, Kafka's index-point rule).

Same function names as the compiled module where both exist (index_lookup,
timeindex_lookup, used_entries). Everything works on in-memory images of the files.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

INDEX_ENTRY_SIZE = 8
TIMEINDEX_ENTRY_SIZE = 12
# The independent oracle's own copy of the layout (checked against the core's export in
# tests/core/test_records.py).
HEADER_SIZE = 61
LOG_OVERHEAD = 12  # base_offset + batch_length, the bytes batch_length does not count
INT32_MAX = 2**31 - 1

# Fixed header fields the segment reads (layout in src/_core/batch.h).
_HEADER = struct.Struct(">qiibIhiqqqhii")


@dataclass(frozen=True)
class BatchInfo:
    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int
    crc: int


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes | memoryview) -> int:
    """CRC-32C (Castagnoli), bit-reflected, one table lookup per byte."""
    crc = 0xFFFFFFFF
    for byte in bytes(data):
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def parse_header(log: bytes, pos: int) -> BatchInfo | None:
    """The batch at pos, or None when no whole, sane batch starts there (no CRC check)."""
    if len(log) - pos < HEADER_SIZE:
        return None
    (base, length, _epoch, magic, crc, _attrs, last_delta, _base_ts, max_ts,
     _pid, _pepoch, _seq, _count) = _HEADER.unpack_from(log, pos)
    if magic != 2 or length < HEADER_SIZE - LOG_OVERHEAD or last_delta < 0:
        return None
    size = length + LOG_OVERHEAD
    if pos + size > len(log):
        return None
    return BatchInfo(pos, base, base + last_delta, max_ts, size, crc)


def scan(log: bytes, base_offset: int = 0, check_crc: bool = False,
         max_batch_size: int = 0) -> tuple[list[BatchInfo], int]:
    """Walks the batches from the start; returns them and the end of the last good one.
    A batch is bad when torn, corrupt (CRC when check_crc), too large or not after the
    previous batch's offsets."""
    batches: list[BatchInfo] = []
    pos = 0
    next_offset = base_offset
    while pos < len(log):
        b = parse_header(log, pos)
        if b is None or b.base_offset < next_offset or b.last_offset - base_offset > INT32_MAX:
            break
        if max_batch_size and b.size > max_batch_size:
            break
        if check_crc and crc32c(log[pos + 21:pos + b.size]) != b.crc:
            break
        batches.append(b)
        next_offset = b.last_offset + 1
        pos += b.size
    return batches, pos


def build_indexes(batches: Sequence[BatchInfo], base_offset: int, index_interval_bytes: int,
                  max_entries: int = 2**62) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Kafka's index points (LogSegment.append): a batch gets an offset entry
    (last_offset - base, position) once more than index_interval_bytes were written since
    the previous entry's batch started; the time index gets (max timestamp so far,
    relative offset of the batch that first reached it) at the same points when the max
    timestamp grew since its last entry."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since = 0
    max_ts, max_ts_offset, last_time_ts = -1, base_offset, -1
    for b in batches:
        if b.max_timestamp > max_ts:
            max_ts, max_ts_offset = b.max_timestamp, b.last_offset
        if since > index_interval_bytes:
            if len(offsets) < max_entries:
                offsets.append((b.last_offset - base_offset, b.position))
            if max_ts > last_time_ts and len(times) < max_entries:
                times.append((max_ts, max_ts_offset - base_offset))
                last_time_ts = max_ts
            since = 0
        since += b.size
    return offsets, times


def encode_index(entries: Sequence[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in entries)


def encode_timeindex(entries: Sequence[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in entries)


def used_entries(buf: bytes, entry_size: int) -> int:
    """Entries up to the last non-zero one (zeros after it are preallocated space)."""
    n = len(buf) // entry_size
    while n > 0 and not any(buf[(n - 1) * entry_size:n * entry_size]):
        n -= 1
    return n


def index_lookup(buf: bytes, target: int, entries: int = -1) -> tuple[int, int]:
    """Last (relative_offset, position) with relative_offset <= target, or (-1, -1)."""
    n = used_entries(buf, INDEX_ENTRY_SIZE) if entries < 0 else entries
    found = (-1, -1)
    for i in range(n):
        rel, pos = struct.unpack_from(">ii", buf, i * INDEX_ENTRY_SIZE)
        if rel > target:
            break
        found = (rel, pos)
    return found


def timeindex_lookup(buf: bytes, target_timestamp: int, entries: int = -1) -> tuple[int, int]:
    """Last (timestamp, relative_offset) with timestamp <= target_timestamp, or (-1, -1)."""
    n = used_entries(buf, TIMEINDEX_ENTRY_SIZE) if entries < 0 else entries
    found = (-1, -1)
    for i in range(n):
        ts, rel = struct.unpack_from(">qi", buf, i * TIMEINDEX_ENTRY_SIZE)
        if ts > target_timestamp:
            break
        found = (ts, rel)
    return found


def position_of(batches: Sequence[BatchInfo], offset: int, size: int) -> int:
    """Start of the first batch whose last offset is >= offset, or size."""
    for b in batches:
        if b.last_offset >= offset:
            return b.position
    return size


def read(batches: Sequence[BatchInfo], offset: int, max_bytes: int,
         max_position: int = -1) -> tuple[int, int] | None:
    """(position, length) of whole batches from the one holding offset: at least one,
    then as many as fit in max_bytes, never past max_position."""
    size = batches[-1].position + batches[-1].size if batches else 0
    if not batches or offset > batches[-1].last_offset:
        return None
    cap = size if max_position < 0 else min(size, max_position)
    chosen = [b for b in batches if b.last_offset >= offset]
    start = chosen[0].position
    end = start
    for b in chosen:
        if b.position + b.size > cap:
            break
        if end > start and b.position + b.size - start > max_bytes:
            break
        end = b.position + b.size
    return None if end == start else (start, end - start)


def offset_for_timestamp(batches: Sequence[BatchInfo], timestamp: int) -> int | None:
    """base_offset of the first batch whose max_timestamp >= timestamp, or None."""
    for b in batches:
        if b.max_timestamp >= timestamp:
            return b.base_offset
    return None
