"""Pure-Python record batches (Kafka message format v2): the test oracle for _core.records.

Slow and plain on purpose: struct unpacking and one loop per record, written to be checked
by eye against apache/kafka DefaultRecordBatch / DefaultRecord. Same names, arguments,
exceptions and error fields as ``pykfk._core.records`` for what it covers (parse, validate,
assign offsets, LogAppendTime, scan, build, iterate), so tests can run both and compare.
The layout block is in ``src/_core/batch.h``.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import cramjam

from pykfk._core.errors import CorruptBatchError, InvalidRecordError, RecordTooLargeError
from pykfk._reference.crc import crc32c

if TYPE_CHECKING:
    from typing_extensions import Buffer

# Field offsets inside a batch (batch.h). Declared again on purpose: this module is the
# independent oracle the core is tested against, so it shares no code with it;
# tests/core/test_records.py checks these numbers against the core's export.
BASE_OFFSET, LENGTH, LEADER_EPOCH, MAGIC, CRC, ATTRIBUTES = 0, 8, 12, 16, 17, 21
LAST_OFFSET_DELTA, MAX_TIMESTAMP, RECORDS_COUNT, HEADER_SIZE, LOG_OVERHEAD = 23, 35, 57, 61, 12
_HEADER = struct.Struct(">qiibIhiqqqhii")
ATTR_CODEC_MASK, ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, ATTR_CONTROL = 0x07, 0x08, 0x10, 0x20
CODEC_MAX = 4
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


@dataclass(frozen=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


@dataclass(frozen=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    batch: BatchHeader

    @property
    def timestamp_type(self) -> int:
        return self.batch.timestamp_type

    @property
    def is_control(self) -> bool:
        return self.batch.is_control


class _Fail(Exception):
    """A check failed at `offset` (relative to the records area or batch)."""

    def __init__(self, field: str, offset: int, message: str):
        super().__init__(message)
        self.field, self.offset, self.message = field, offset, message


def _view(buf: Buffer) -> bytes:
    return bytes(memoryview(buf).cast("B"))


def _unpack_header(data: bytes, pos: int) -> BatchHeader:
    (base_offset, batch_length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
     producer_id, producer_epoch, base_sequence, count) = _HEADER.unpack_from(data, pos)
    return BatchHeader(base_offset, batch_length, epoch, magic, crc, attributes & 0xFFFF,
                       last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                       count)


def _check_header(data: bytes, pos: int) -> BatchHeader | None:
    """Header of the batch at pos, None when fewer than 61 bytes are there; raises
    CorruptBatchError for a bad magic or a batch_length below the header size."""
    avail = len(data) - pos
    if avail < HEADER_SIZE:
        if avail > MAGIC and data[pos + MAGIC] != 2:
            raise CorruptBatchError("unsupported magic byte (expected 2)", "magic", pos, pos + MAGIC)
        if avail >= LEADER_EPOCH and struct.unpack_from(">i", data, pos + LENGTH)[0] < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptBatchError("batch_length smaller than a batch header", "batch_length",
                                    pos, pos + LENGTH)
        return None
    h = _unpack_header(data, pos)
    if h.magic != 2:
        raise CorruptBatchError("unsupported magic byte (expected 2)", "magic", pos, pos + MAGIC)
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatchError("batch_length smaller than a batch header", "batch_length", pos,
                                pos + LENGTH)
    return h


def _truncated(pos: int) -> CorruptBatchError:
    return CorruptBatchError("truncated batch", "batch_length", pos, pos + LENGTH)


def parse_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    data = _view(buf)
    if pos < 0 or pos > len(data):
        raise ValueError(f"position {pos} outside a buffer of {len(data)} bytes")
    h = _check_header(data, pos)
    if h is None:
        raise _truncated(pos)
    return h


def read_varint(data: bytes, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """Zigzag varint at pos (at most max_bytes, 5 for int32 and 10 for int64); returns
    (value, next position). Raises ValueError when truncated, too long or overflowing."""
    raw = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise ValueError("truncated varint")
        byte = data[pos + i]
        raw |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            # the last byte of a 5-byte varint holds bits 28-31, of a 10-byte one bit 63
            if i == max_bytes - 1 and byte > (0x0F if max_bytes == 5 else 0x01):
                raise ValueError("varint overflows")
            return (raw >> 1) ^ -(raw & 1), pos + i + 1
    raise ValueError("varint too long")


def _span(data: bytes, p: int, end: int, min_length: int, field: str, base: int) -> tuple[int, int, int]:
    """(start, length, next) of a length-prefixed field; offsets for errors relative to base."""
    try:
        length, q = read_varint(data, p, end)
    except ValueError:
        raise _Fail(field, p - base, "bad length varint") from None
    if length < min_length:
        raise _Fail(field, p - base, "negative length")
    if length > end - q:
        raise _Fail(field, p - base, "length runs past the end of the record")
    return q, length, q + max(length, 0)


def _parse_record(data: bytes, p: int, end: int, base: int) -> dict[str, Any]:
    start = p
    try:
        rec_len, p = read_varint(data, p, end)
    except ValueError:
        raise _Fail("record.length", start - base, "bad record length varint") from None
    if rec_len < 1 or rec_len > end - p:
        raise _Fail("record.length", start - base, "record length out of bounds")
    rec_end = p + rec_len
    p += 1  # attributes
    try:
        ts_delta, p = read_varint(data, p, rec_end, 10)
    except ValueError:
        raise _Fail("record.timestamp_delta", p - base, "bad timestamp_delta varint") from None
    try:
        offset_delta, p = read_varint(data, p, rec_end)
    except ValueError:
        raise _Fail("record.offset_delta", p - base, "bad offset_delta varint") from None
    kpos, klen, p = _span(data, p, rec_end, -1, "record.key", base)
    vpos, vlen, p = _span(data, p, rec_end, -1, "record.value", base)
    try:
        nheaders, q = read_varint(data, p, rec_end)
    except ValueError:
        raise _Fail("record.headers", p - base, "bad header count") from None
    if nheaders < 0:
        raise _Fail("record.headers", p - base, "bad header count")
    p = q
    headers = []
    for _ in range(nheaders):
        hkpos, hklen, p = _span(data, p, rec_end, 0, "record.header.key", base)
        hvpos, hvlen, p = _span(data, p, rec_end, -1, "record.header.value", base)
        headers.append((data[hkpos:hkpos + hklen].decode("utf-8", "replace"),
                        None if hvlen < 0 else data[hvpos:hvpos + hvlen]))
    if p != rec_end:
        raise _Fail("record.length", start - base, "record length does not match its fields")
    return {
        "end": rec_end, "timestamp_delta": ts_delta, "offset_delta": offset_delta,
        "key": None if klen < 0 else data[kpos:kpos + klen],
        "value": None if vlen < 0 else data[vpos:vpos + vlen], "headers": headers,
    }


def _walk_records(data: bytes, start: int, end: int, h: BatchHeader, client: bool) -> list[dict[str, Any]]:
    records, p, prev = [], start, -1
    for i in range(h.records_count):
        if p == end:
            raise _Fail("records_count", p - start, "fewer records than records_count")
        r = _parse_record(data, p, end, start)
        if client and r["offset_delta"] != i:
            raise _Fail("record.offset_delta", p - start + 1, "offset_delta is not the record's index")
        if r["offset_delta"] <= prev or r["offset_delta"] > h.last_offset_delta:
            raise _Fail("record.offset_delta", p - start + 1, "offset_delta not increasing")
        prev = r["offset_delta"]
        records.append(r)
        p = r["end"]
    if p != end:
        raise _Fail("records_count", p - start, "bytes left after records_count records")
    return records


def _decompress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return bytes(cramjam.gzip.decompress(data))
    if codec == 2:
        if data[:8] == _XERIAL_MAGIC and len(data) >= 16:
            out, at = [], 16
            while at < len(data):
                (n,) = struct.unpack_from(">i", data, at)
                out.append(bytes(cramjam.snappy.decompress_raw(data[at + 4:at + 4 + n])))
                at += 4 + n
            return b"".join(out)
        return bytes(cramjam.snappy.decompress_raw(data))
    if codec == 3:
        return bytes(cramjam.lz4.decompress(data))
    if codec == 4:
        return bytes(cramjam.zstd.decompress(data))
    raise ValueError(f"unknown codec {codec}")


def _validate_one(data: bytes, pos: int, max_batch_size: int, check_records: bool, client: bool,
                  decompress: bool) -> BatchHeader:
    h = _check_header(data, pos)
    if h is None:
        raise _truncated(pos)
    total = h.batch_length + LOG_OVERHEAD
    if max_batch_size and total > max_batch_size:
        raise RecordTooLargeError("batch larger than the allowed maximum", "batch_length", pos, pos + LENGTH)
    if total > len(data) - pos:
        raise _truncated(pos)
    if crc32c(data, pos + ATTRIBUTES, pos + total) != h.crc:
        raise CorruptBatchError("CRC-32C mismatch", "crc", pos, pos + CRC)

    def invalid(message: str, field: str, at: int) -> InvalidRecordError:
        return InvalidRecordError(message, field, pos, pos + at)

    if h.compression > CODEC_MAX:
        raise invalid("unknown compression codec", "attributes", ATTRIBUTES)
    if h.records_count < 0:
        raise invalid("negative records_count", "records_count", RECORDS_COUNT)
    if h.last_offset_delta < 0:
        raise invalid("negative last_offset_delta", "last_offset_delta", LAST_OFFSET_DELTA)
    if h.last_offset_delta < h.records_count - 1:
        raise invalid("last_offset_delta smaller than records_count - 1", "last_offset_delta",
                      LAST_OFFSET_DELTA)
    if client and h.records_count < 1:
        raise invalid("batch has no records", "records_count", RECORDS_COUNT)
    if client and h.last_offset_delta != h.records_count - 1:
        raise invalid("last_offset_delta is not records_count - 1", "last_offset_delta",
                      LAST_OFFSET_DELTA)
    if check_records and (h.compression == 0 or decompress):
        try:
            if h.compression == 0:
                _walk_records(data, pos + HEADER_SIZE, pos + total, h, client)
            else:
                area = _decompress(h.compression, data[pos + HEADER_SIZE:pos + total])
                _walk_records(area, 0, len(area), h, client)
        except _Fail as exc:
            at = HEADER_SIZE + (exc.offset if h.compression == 0 else 0)
            raise invalid(exc.message, exc.field, at) from None
    return h


def validate_batches(buf: Buffer, max_batch_size: int = 0, check_records: bool = True, *,
                     from_client: bool = False, decompress: bool = False,
                     max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> list[BatchHeader]:
    data, pos, headers = _view(buf), 0, []
    while pos < len(data):
        h = _validate_one(data, pos, max_batch_size, check_records, from_client, decompress)
        headers.append(h)
        pos += h.size
    return headers


def _framing(data: bytes | bytearray | memoryview) -> list[tuple[int, BatchHeader]]:
    pos, out = 0, []
    while pos < len(data):
        h = _check_header(bytes(data), pos)
        if h is None or h.size > len(data) - pos:
            raise _truncated(pos)
        if h.last_offset_delta < 0:
            raise InvalidRecordError("negative last_offset_delta", "last_offset_delta", pos,
                                     pos + LAST_OFFSET_DELTA)
        out.append((pos, h))
        pos += h.size
    return out


def assign_offsets(buf: Buffer, base_offset: int, partition_leader_epoch: int = -1) -> int:
    if base_offset < 0:
        raise ValueError("base_offset must be >= 0")
    view = memoryview(buf).cast("B")
    if view.readonly:
        raise TypeError("assign_offsets needs a writable buffer")
    next_offset = base_offset
    for pos, h in _framing(view):
        struct.pack_into(">q", view, pos + BASE_OFFSET, next_offset)
        struct.pack_into(">i", view, pos + LEADER_EPOCH, partition_leader_epoch)
        next_offset += h.last_offset_delta + 1
    return next_offset


def set_log_append_time(buf: Buffer, timestamp_ms: int) -> None:
    view = memoryview(buf).cast("B")
    if view.readonly:
        raise TypeError("set_log_append_time needs a writable buffer")
    for pos, h in _framing(view):
        struct.pack_into(">H", view, pos + ATTRIBUTES, h.attributes | ATTR_TIMESTAMP_TYPE)
        struct.pack_into(">q", view, pos + MAX_TIMESTAMP, timestamp_ms)
        struct.pack_into(">I", view, pos + CRC, crc32c(view, pos + ATTRIBUTES, pos + h.size))


def scan_batches(buf: Buffer, start: int = 0) -> tuple[int, int]:
    data = _view(buf)
    if start < 0 or start > len(data):
        raise ValueError(f"start {start} outside a buffer of {len(data)} bytes")
    pos, count = start, 0
    while pos < len(data):
        h = _check_header(data, pos)
        if h is None or h.size > len(data) - pos:
            break
        pos += h.size
        count += 1
    return count, pos - start


def iter_records(buf: Buffer, start: int = 0) -> Iterator[Record]:
    data, pos = _view(buf), start
    while pos < len(data):
        h = _check_header(data, pos)
        if h is None or h.size > len(data) - pos:
            return
        h = _validate_one(data, pos, 0, False, False, False)
        if h.compression:
            area = _decompress(h.compression, data[pos + HEADER_SIZE:pos + h.size])
            start_at, end = 0, len(area)
        else:
            area, start_at, end = data, pos + HEADER_SIZE, pos + h.size
        try:
            records = _walk_records(area, start_at, end, h, False)
        except _Fail as exc:
            raise InvalidRecordError(exc.message, exc.field, pos, pos + HEADER_SIZE) from None
        for r in records:
            ts = h.max_timestamp if h.timestamp_type else h.base_timestamp + r["timestamp_delta"]
            yield Record(h.base_offset + r["offset_delta"], ts, r["key"], r["value"], r["headers"], h)
        pos += h.size


def write_varint(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    raw &= (1 << 64) - 1
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _field(value: Any) -> bytes:
    if value is None:
        return write_varint(-1)
    if isinstance(value, str):
        value = value.encode("utf-8")
    data = bytes(value)
    return write_varint(len(data)) + data


def _compress(codec: int, data: bytes) -> bytes:
    if codec == 1:
        return bytes(cramjam.gzip.compress(data))
    if codec == 2:
        out = bytearray(_XERIAL_MAGIC + struct.pack(">ii", 1, 1))
        for at in range(0, len(data), 32 * 1024):
            block = bytes(cramjam.snappy.compress_raw(data[at:at + 32 * 1024]))
            out += struct.pack(">i", len(block)) + block
        return bytes(out)
    if codec == 3:
        c = cramjam.lz4.Compressor(level=9, content_checksum=False, block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    if codec == 4:
        return bytes(cramjam.zstd.compress(data, level=3))
    raise ValueError(f"unknown compression codec {codec}")


def build_batch(records: Sequence[tuple[Any, Any, int | None, Sequence[tuple[Any, Any]]]], *,
                base_offset: int = 0, compression: int = 0, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1,
                partition_leader_epoch: int = -1, timestamp_type: int = 0,
                is_transactional: bool = False, is_control: bool = False,
                offset_deltas: Sequence[int] | None = None, last_offset_delta: int = -1) -> bytes:
    records = list(records)
    if not records:
        raise ValueError("a batch needs at least one record")
    deltas = list(range(len(records))) if offset_deltas is None else list(offset_deltas)
    if len(deltas) != len(records):
        raise ValueError(f"{len(deltas)} offset deltas for {len(records)} records")
    previous = -1
    for i, delta in enumerate(deltas):
        if delta <= previous or delta > 0x7FFFFFFF:
            raise ValueError(f"offset delta {delta} of record {i} is not above {previous} "
                             f"and within int32")
        previous = delta
    if last_offset_delta == -1:
        last_offset_delta = deltas[-1]
    elif last_offset_delta < deltas[-1] or last_offset_delta > 0x7FFFFFFF:
        raise ValueError(f"last_offset_delta {last_offset_delta} is below the last record's "
                         f"offset delta {deltas[-1]} or beyond int32")
    stamps = [time.time_ns() // 1_000_000 if r[2] is None else r[2] for r in records]
    base_ts = stamps[0]
    area = bytearray()
    for (key, value, _, headers), ts, delta in zip(records, stamps, deltas):
        body = bytes([0]) + write_varint(ts - base_ts) + write_varint(delta) + _field(key) + _field(value)
        headers = headers or ()
        body += write_varint(len(headers))
        for hkey, hvalue in headers:
            body += _field(hkey) + _field(hvalue)
        area += write_varint(len(body)) + body
    payload = _compress(compression, bytes(area)) if compression else bytes(area)
    attributes = (compression | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
                  | (ATTR_TRANSACTIONAL if is_transactional else 0) | (ATTR_CONTROL if is_control else 0))
    tail = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_ts, max(stamps), producer_id,
                       producer_epoch, base_sequence, len(records)) + payload
    head = struct.pack(">qiib", base_offset, len(tail) + 9, partition_leader_epoch, 2)
    return head + struct.pack(">I", crc32c(tail)) + tail
