# cython: language_level=3
"""Record batches: Kafka message format v2 (apache/kafka DefaultRecordBatch, KIP-98) and
legacy message sets (magic 0/1, apache/kafka LegacyRecord, KIP-32).

Validation, in-place offset and timestamp patching, building, decompressing reads and
conversion between the formats. The v2 layout block is in batch.h, the legacy one above
_convert_message_set. Buffers cross in through the buffer protocol and are released before
every function returns (nothing here keeps an export, so an mmap can still be closed).
"""
cimport cython
from cpython cimport array
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE,
                             PyBUF_WRITABLE)
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from libc.stdint cimport (int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t,
                          INT64_MIN)
from libc.string cimport memcpy, memmove

from _batch cimport *
from _crc32 cimport pk_crc32, pk_crc32c

import array as _array
import time as _time

import cramjam

from pykfk._core.errors import CorruptBatchError, InvalidRecordError, RecordTooLargeError

# The v2 batch header as Python sees it, from batch.h's declaration (the one owner of
# the layout: see the field table there). BATCH_HEADER_FORMAT packs and unpacks the 61
# bytes with struct: base_offset q, batch_length i, partition_leader_epoch i, magic b,
# crc I, attributes h (Kafka's int16), last_offset_delta i, base_timestamp q,
# max_timestamp q, producer_id q, producer_epoch h, base_sequence i, records_count i.
BATCH_HEADER_SIZE = PK_BATCH_HEADER_SIZE
LOG_OVERHEAD = PK_BATCH_LOG_OVERHEAD
BATCH_HEADER_FORMAT = ">qiibIhiqqqhii"
BATCH_FIELD_OFFSETS = {
    "base_offset": PK_BATCH_BASE_OFFSET, "batch_length": PK_BATCH_LENGTH,
    "partition_leader_epoch": PK_BATCH_LEADER_EPOCH, "magic": PK_BATCH_MAGIC, "crc": PK_BATCH_CRC,
    "attributes": PK_BATCH_ATTRIBUTES, "last_offset_delta": PK_BATCH_LAST_OFFSET_DELTA,
    "base_timestamp": PK_BATCH_BASE_TIMESTAMP, "max_timestamp": PK_BATCH_MAX_TIMESTAMP,
    "producer_id": PK_BATCH_PRODUCER_ID, "producer_epoch": PK_BATCH_PRODUCER_EPOCH,
    "base_sequence": PK_BATCH_BASE_SEQUENCE, "records_count": PK_BATCH_RECORDS_COUNT,
}
ATTR_CODEC_MASK = PK_ATTR_CODEC_MASK
ATTR_TIMESTAMP_TYPE = PK_ATTR_TIMESTAMP_TYPE
ATTR_TRANSACTIONAL = PK_ATTR_TRANSACTIONAL
ATTR_CONTROL = PK_ATTR_CONTROL

# Compression codec ids (attributes bits 0-2), as in apache/kafka CompressionType.
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
_CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

# Bound on what one compressed batch (or legacy wrapper) may expand to. Kafka has no
# such setting; without one a 64 KiB zstd batch could ask for gigabytes. 64 MiB is 64x
# Kafka's default max.message.bytes (1 MiB), far above real compression ratios.
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

# aiokafka releases the GIL for CRCs over 5 KiB (see crc.pyx); the same figure here.
cdef Py_ssize_t _GIL_RELEASE_BYTES = 5 * 1024


# snappy-java's stream header (xerial framing, used by the Java client and both Python
# clients): magic "\x82SNAPPY\0", version 1, minimum compatible version 1, then blocks of
# (int32 compressed length, raw snappy block). snappy-java's default block is 32 KiB.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = _XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01"
_XERIAL_BLOCK_SIZE = 32 * 1024


# ---------------------------------------------------------------------------------------
# Batch header object

@cython.final
cdef class BatchHeader:
    """The 61-byte header of a magic 2 batch (read-only; field names as in apache/kafka
    DefaultRecordBatch). Produced by parse_batch_header / validate_batches."""
    cdef readonly int64_t base_offset
    cdef readonly int32_t batch_length
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int magic
    cdef readonly uint32_t crc
    cdef readonly int attributes
    cdef readonly int32_t last_offset_delta
    cdef readonly int64_t base_timestamp
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t producer_id
    cdef readonly int producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly int32_t records_count

    def __init__(self):
        raise TypeError("BatchHeader objects come from parse_batch_header / validate_batches")

    @property
    def compression(self) -> int:
        return self.attributes & PK_ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & PK_ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & PK_ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & PK_ATTR_CONTROL)

    @property
    def size(self) -> int:
        return <int64_t>self.batch_length + PK_BATCH_LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    def _key(self):
        return (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
                self.crc, self.attributes, self.last_offset_delta, self.base_timestamp,
                self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
                self.records_count)

    def __eq__(self, other):
        if not isinstance(other, BatchHeader):
            return NotImplemented
        return self._key() == (<BatchHeader>other)._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return (f"BatchHeader(base_offset={self.base_offset}, records_count={self.records_count}, "
                f"last_offset_delta={self.last_offset_delta}, size={self.size}, "
                f"compression={_CODEC_NAMES[self.compression] if self.compression <= 4 else self.compression}, "
                f"producer_id={self.producer_id}, crc=0x{self.crc:08x})")


cdef BatchHeader _header_object(const pk_batch_header *h):
    cdef BatchHeader o = BatchHeader.__new__(BatchHeader)
    o.base_offset = h.base_offset
    o.batch_length = h.batch_length
    o.partition_leader_epoch = h.partition_leader_epoch
    o.magic = h.magic
    o.crc = h.crc
    o.attributes = h.attributes
    o.last_offset_delta = h.last_offset_delta
    o.base_timestamp = h.base_timestamp
    o.max_timestamp = h.max_timestamp
    o.producer_id = h.producer_id
    o.producer_epoch = h.producer_epoch
    o.base_sequence = h.base_sequence
    o.records_count = h.records_count
    return o


# ---------------------------------------------------------------------------------------
# Errors

cdef int _raise_batch_error(int rc, pk_batch_error *err, const uint8_t *batch,
                            Py_ssize_t avail, Py_ssize_t pos, Py_ssize_t max_batch_size) except -1:
    """Turns a pk_batch_* result into the exception the contract names."""
    if rc == PK_BATCH_INCOMPLETE:
        if avail < PK_BATCH_HEADER_SIZE:
            raise CorruptBatchError(f"truncated batch: {avail} bytes left, a batch header needs "
                                    f"{PK_BATCH_HEADER_SIZE}", "batch_length", pos,
                                    pos + PK_BATCH_LENGTH)
        raise CorruptBatchError(f"truncated batch: batch_length promises "
                                f"{<int64_t>pk_load_u32(batch + PK_BATCH_LENGTH) + 12} bytes, "
                                f"{avail} left", "batch_length", pos, pos + PK_BATCH_LENGTH)
    field = err.field.decode("ascii")
    message = err.message.decode("ascii", "replace")
    cdef Py_ssize_t field_offset = pos + <Py_ssize_t>err.offset
    if field in ("crc", "magic", "batch_length"):
        if (field == "batch_length" and max_batch_size > 0 and avail >= PK_BATCH_LEADER_EPOCH
                and <int64_t>(<int32_t>pk_load_u32(batch + PK_BATCH_LENGTH)) + 12 > max_batch_size):
            raise RecordTooLargeError(f"{message} ({max_batch_size} bytes)", field, pos, field_offset)
        raise CorruptBatchError(message, field, pos, field_offset)
    # the CRC matched: the bytes are as the producer wrote them, they break a record rule
    raise InvalidRecordError(message, field, pos, field_offset)


# ---------------------------------------------------------------------------------------
# Framing: parse, validate, scan, in-place patches

def parse_batch_header(buf, Py_ssize_t pos=0):
    """The header of the magic 2 batch at buf[pos:] (only the 61 header bytes are needed;
    the CRC is not checked)."""
    cdef Py_buffer view
    cdef pk_batch_header h
    cdef pk_batch_error err
    cdef int rc
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if pos < 0 or pos > view.len:
            raise ValueError(f"position {pos} outside a buffer of {view.len} bytes")
        rc = pk_batch_parse_header(<const uint8_t *>view.buf + pos, <size_t>(view.len - pos), &h, &err)
        if rc != PK_BATCH_OK:
            _raise_batch_error(rc, &err, <const uint8_t *>view.buf + pos, view.len - pos, pos, 0)
        return _header_object(&h)
    finally:
        PyBuffer_Release(&view)


# Batches validated per trip without the GIL: their headers wait in a stack array until
# the GIL is back to make the header objects (64 * 80 bytes).
cdef enum:
    _HEADERS_PER_TRIP = 64


cdef struct _Assignment:
    # In-place patches a leader makes while validating (Kafka's LogValidator): the next
    # offset to give (-1: no patching, a follower's or a reader's validation), the leader
    # epoch, and the LogAppendTime timestamp (-1: the topic keeps CreateTime).
    int64_t next_offset
    int32_t leader_epoch
    int64_t append_time


cdef inline void _patch(uint8_t *b, pk_batch_header *h, Py_ssize_t total, _Assignment *a) noexcept nogil:
    """The leader's patches of one validated batch, mirrored into its header. base_offset
    and partition_leader_epoch sit before the CRC-covered bytes; LogAppendTime changes
    attributes and max_timestamp, which the CRC covers, so it is recomputed."""
    pk_store_u64(b + PK_BATCH_BASE_OFFSET, <uint64_t>a.next_offset)
    pk_store_u32(b + PK_BATCH_LEADER_EPOCH, <uint32_t>a.leader_epoch)
    h.base_offset = a.next_offset
    h.partition_leader_epoch = a.leader_epoch
    a.next_offset += <int64_t>h.last_offset_delta + 1
    if a.append_time >= 0:
        h.attributes = <int16_t>(h.attributes | PK_ATTR_TIMESTAMP_TYPE)
        h.max_timestamp = a.append_time
        pk_store_u16(b + PK_BATCH_ATTRIBUTES, <uint16_t>h.attributes)
        pk_store_u64(b + PK_BATCH_MAX_TIMESTAMP, <uint64_t>a.append_time)
        h.crc = pk_crc32c(0, b + PK_BATCH_ATTRIBUTES, <size_t>(total - PK_BATCH_ATTRIBUTES))
        pk_store_u32(b + PK_BATCH_CRC, h.crc)


cdef Py_ssize_t _validate_trip(const uint8_t *p, Py_ssize_t length, Py_ssize_t pos,
                               size_t max_batch_size, int checks, bint stop_at_compressed,
                               pk_batch_header *hs, int *count, int *rc, pk_batch_error *err,
                               _Assignment *assign) noexcept nogil:
    """Validates batches from pos until _HEADERS_PER_TRIP are done, the buffer ends, a
    batch fails (*rc) or, with stop_at_compressed, right after a compressed batch; returns
    the position after the last valid batch. With ``assign`` (next_offset >= 0) each valid
    batch is patched in place right after its check, so the bytes are walked once."""
    cdef Py_ssize_t total
    count[0] = 0
    rc[0] = PK_BATCH_OK
    while pos < length and count[0] < _HEADERS_PER_TRIP:
        rc[0] = pk_batch_validate(p + pos, <size_t>(length - pos), max_batch_size, checks,
                                  &hs[count[0]], err)
        if rc[0] != PK_BATCH_OK:
            break
        total = <Py_ssize_t>hs[count[0]].batch_length + PK_BATCH_LOG_OVERHEAD
        if assign.next_offset >= 0:
            _patch(<uint8_t *>(p + pos), &hs[count[0]], total, assign)
        count[0] += 1
        pos += total
        if stop_at_compressed and (hs[count[0] - 1].attributes & PK_ATTR_CODEC_MASK):
            break
    return pos


def validate_batches(buf, Py_ssize_t max_batch_size=0, bint check_records=True, *,
                     bint from_client=False, bint decompress=False,
                     Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Checks that buf holds only complete, valid magic 2 batches; returns their headers.

    See records.pyi for the rules. One Python object per batch, none per record.
    """
    cdef _Assignment none
    none.next_offset = -1
    none.leader_epoch = -1
    none.append_time = -1
    return _validate(buf, PyBUF_SIMPLE, max_batch_size, check_records, from_client, decompress,
                     max_decompressed_size, &none, 0)


def validate_and_assign(buf, int64_t base_offset, int32_t partition_leader_epoch,
                        Py_ssize_t max_batch_size=0, *, bint decompress=False,
                        int64_t log_append_time_ms=-1, Py_ssize_t max_batches=0,
                        Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """The leader's one step over a producer's batches (Kafka's LogValidator): validate
    as ``validate_batches(..., from_client=True)`` and, batch by batch in the same pass,
    write base offsets from ``base_offset`` and ``partition_leader_epoch`` in place (and
    LogAppendTime with a new CRC when ``log_append_time_ms`` >= 0). Returns the headers
    as patched. ``max_batches`` > 0 refuses more batches than that (InvalidRecordError).
    On error nothing is to be written: batches before the bad one may be patched already.
    """
    cdef _Assignment assign
    if base_offset < 0:
        raise ValueError("base_offset must be >= 0")
    assign.next_offset = base_offset
    assign.leader_epoch = partition_leader_epoch
    assign.append_time = log_append_time_ms
    return _validate(buf, PyBUF_WRITABLE, max_batch_size, True, True, decompress,
                     max_decompressed_size, &assign, max_batches)


cdef list _validate(buf, int flags, Py_ssize_t max_batch_size, bint check_records,
                    bint from_client, bint decompress, Py_ssize_t max_decompressed_size,
                    _Assignment *assign, Py_ssize_t max_batches):
    cdef Py_buffer view
    cdef pk_batch_header hs[_HEADERS_PER_TRIP]
    cdef pk_batch_error err
    cdef Py_ssize_t pos = 0, last, k
    cdef const uint8_t *p
    cdef int rc, count
    cdef int checks = (PK_CHECK_RECORDS if check_records else 0) | (PK_CHECK_CLIENT if from_client else 0)
    cdef bint inflate = decompress and check_records
    cdef list headers = []
    if max_batch_size < 0:
        raise ValueError("max_batch_size must be >= 0 (0 = no limit)")
    PyObject_GetBuffer(buf, &view, flags)
    try:
        p = <const uint8_t *>view.buf
        while pos < view.len:
            # the CRC + record walk without the GIL when there is enough of it to be worth
            # the release (one release per trip of up to _HEADERS_PER_TRIP batches)
            if view.len - pos >= _GIL_RELEASE_BYTES:
                with nogil:
                    pos = _validate_trip(p, view.len, pos, <size_t>max_batch_size, checks, inflate,
                                         hs, &count, &rc, &err, assign)
            else:
                pos = _validate_trip(p, view.len, pos, <size_t>max_batch_size, checks, inflate,
                                     hs, &count, &rc, &err, assign)
            for k in range(count):
                headers.append(_header_object(&hs[k]))
            if max_batches > 0 and len(headers) > max_batches:
                raise InvalidRecordError(
                    f"Produce v3+ requires exactly one record batch per partition, got more than "
                    f"{max_batches}", "batch_length", 0, 0)
            # A trip ends right after a compressed batch whose records are to be checked, so
            # errors come in the order of the bytes (and a failing batch never follows it).
            if count and inflate and (hs[count - 1].attributes & PK_ATTR_CODEC_MASK):
                last = pos - (<Py_ssize_t>hs[count - 1].batch_length + PK_BATCH_LOG_OVERHEAD)
                _check_compressed_records(p + last, &hs[count - 1], last, checks, max_decompressed_size)
            if rc != PK_BATCH_OK:
                _raise_batch_error(rc, &err, p + pos, view.len - pos, pos, max_batch_size)
    finally:
        PyBuffer_Release(&view)
    return headers


cdef int _check_compressed_records(const uint8_t *batch, const pk_batch_header *h, Py_ssize_t pos,
                                   int checks, Py_ssize_t limit) except -1:
    cdef pk_batch_error err
    cdef Py_ssize_t total = <Py_ssize_t>h.batch_length + PK_BATCH_LOG_OVERHEAD
    compressed = PyBytes_FromStringAndSize(<const char *>batch + PK_BATCH_HEADER_SIZE,
                                           total - PK_BATCH_HEADER_SIZE)
    area = _decompress(h.attributes & PK_ATTR_CODEC_MASK, compressed, limit, pos, 2)
    cdef const uint8_t *a = <const uint8_t *>PyByteArray_AS_STRING(area)
    if pk_records_check_ex(a, <size_t>PyByteArray_GET_SIZE(area), h.records_count,
                           h.last_offset_delta, checks, &err) != PK_BATCH_OK:
        raise InvalidRecordError(f"{err.message.decode('ascii', 'replace')} (at byte {err.offset} "
                                 f"of the decompressed records)", err.field.decode("ascii"),
                                 pos, pos + PK_BATCH_HEADER_SIZE)
    return 0


cdef Py_ssize_t _check_framing(const uint8_t *p, Py_ssize_t length) except -1:
    """Header-only walk (length and magic) over a buffer that must hold whole batches;
    returns the batch count. Used before patching so a bad buffer is left untouched."""
    cdef pk_batch_header h
    cdef pk_batch_error err
    cdef Py_ssize_t pos = 0, count = 0, total
    cdef int rc
    while pos < length:
        rc = pk_batch_parse_header(p + pos, <size_t>(length - pos), &h, &err)
        if rc != PK_BATCH_OK:
            _raise_batch_error(rc, &err, p + pos, length - pos, pos, 0)
        total = <Py_ssize_t>h.batch_length + PK_BATCH_LOG_OVERHEAD
        if total > length - pos:
            _raise_batch_error(PK_BATCH_INCOMPLETE, &err, p + pos, length - pos, pos, 0)
        if h.last_offset_delta < 0:
            raise InvalidRecordError("negative last_offset_delta", "last_offset_delta", pos,
                                     pos + PK_BATCH_LAST_OFFSET_DELTA)
        pos += total
        count += 1
    return count


cdef inline bint _framing_sound(const uint8_t *p, Py_ssize_t length) noexcept nogil:
    """The checks of _check_framing on just the fields they need, without errors: True when
    _check_framing would pass (so the common case skips the full header parse)."""
    cdef Py_ssize_t pos = 0, total
    cdef int32_t batch_length
    while pos < length:
        if length - pos < PK_BATCH_HEADER_SIZE or p[pos + PK_BATCH_MAGIC] != 2:
            return False
        batch_length = <int32_t>pk_load_u32(p + pos + PK_BATCH_LENGTH)
        total = <Py_ssize_t>batch_length + PK_BATCH_LOG_OVERHEAD
        if (batch_length < PK_BATCH_HEADER_SIZE - PK_BATCH_LOG_OVERHEAD or total > length - pos
                or <int32_t>pk_load_u32(p + pos + PK_BATCH_LAST_OFFSET_DELTA) < 0):
            return False
        pos += total
    return True


def assign_offsets(buf, int64_t base_offset, int32_t partition_leader_epoch=-1):
    """Writes base_offset (running across batches) and partition_leader_epoch into every
    batch of the writable buffer; returns the offset after the last batch. Both fields sit
    before the CRC-covered range, so the CRCs stay valid."""
    cdef Py_buffer view
    cdef uint8_t *p
    cdef Py_ssize_t pos = 0
    cdef int64_t next_offset = base_offset
    if base_offset < 0:
        raise ValueError("base_offset must be >= 0")
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        p = <uint8_t *>view.buf
        if not _framing_sound(p, view.len):
            _check_framing(p, view.len)   # raises the precise error
        while pos < view.len:
            pk_store_u64(p + pos + PK_BATCH_BASE_OFFSET, <uint64_t>next_offset)
            pk_store_u32(p + pos + PK_BATCH_LEADER_EPOCH, <uint32_t>partition_leader_epoch)
            next_offset += <int32_t>pk_load_u32(p + pos + PK_BATCH_LAST_OFFSET_DELTA) + 1
            pos += <int32_t>pk_load_u32(p + pos + PK_BATCH_LENGTH) + PK_BATCH_LOG_OVERHEAD
    finally:
        PyBuffer_Release(&view)
    return next_offset


def set_log_append_time(buf, int64_t timestamp_ms):
    """Marks every batch of the writable buffer as LogAppendTime with max_timestamp =
    timestamp_ms and recomputes its CRC-32C (attributes and max_timestamp are covered)."""
    cdef Py_buffer view
    cdef uint8_t *p
    cdef uint8_t *b
    cdef Py_ssize_t pos = 0, total
    PyObject_GetBuffer(buf, &view, PyBUF_WRITABLE)
    try:
        p = <uint8_t *>view.buf
        _check_framing(p, view.len)
        while pos < view.len:
            b = p + pos
            total = <int32_t>pk_load_u32(b + PK_BATCH_LENGTH) + PK_BATCH_LOG_OVERHEAD
            pk_store_u16(b + PK_BATCH_ATTRIBUTES, pk_load_u16(b + PK_BATCH_ATTRIBUTES) | PK_ATTR_TIMESTAMP_TYPE)
            pk_store_u64(b + PK_BATCH_MAX_TIMESTAMP, <uint64_t>timestamp_ms)
            pk_store_u32(b + PK_BATCH_CRC, pk_crc32c(0, b + PK_BATCH_ATTRIBUTES,
                                                     <size_t>(total - PK_BATCH_ATTRIBUTES)))
            pos += total
    finally:
        PyBuffer_Release(&view)


def scan_batches(buf, Py_ssize_t start=0):
    """(batch_count, complete_bytes) of the whole batches in buf[start:]; complete_bytes
    counts from start, so a partial tail is buf[start + complete_bytes:]. Only lengths and
    magic are read (no CRC)."""
    cdef Py_buffer view
    cdef pk_batch_header h
    cdef pk_batch_error err
    cdef Py_ssize_t pos, count = 0, total
    cdef int rc
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or start > view.len:
            raise ValueError(f"start {start} outside a buffer of {view.len} bytes")
        pos = start
        while pos < view.len:
            rc = pk_batch_parse_header(<const uint8_t *>view.buf + pos, <size_t>(view.len - pos), &h, &err)
            if rc == PK_BATCH_INCOMPLETE:
                break
            if rc != PK_BATCH_OK:
                _raise_batch_error(rc, &err, <const uint8_t *>view.buf + pos, view.len - pos, pos, 0)
            total = <Py_ssize_t>h.batch_length + PK_BATCH_LOG_OVERHEAD
            if total > view.len - pos:
                break
            pos += total
            count += 1
        return count, pos - start
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------------------------------
# Compression (cramjam). Output is always bounded by `limit`: cramjam's *_into functions
# write into a fixed buffer and fail instead of growing, so a compression bomb costs at
# most `limit` bytes of memory.

cdef uint32_t _rotl32(uint32_t x, int r) noexcept:
    return (x << r) | (x >> (32 - r))


cdef uint32_t _xxh32_short(const uint8_t *p, size_t n) noexcept:
    """xxHash32 with seed 0 of fewer than 16 bytes (enough for an LZ4 frame descriptor)."""
    cdef uint32_t h = 374761393u + <uint32_t>n
    cdef size_t i = 0
    while i + 4 <= n:
        h += (<uint32_t>p[i] | (<uint32_t>p[i + 1] << 8) | (<uint32_t>p[i + 2] << 16)
              | (<uint32_t>p[i + 3] << 24)) * 3266489917u
        h = _rotl32(h, 17) * 668265263u
        i += 4
    while i < n:
        h += p[i] * 374761393u
        h = _rotl32(h, 11) * 2654435761u
        i += 1
    h ^= h >> 15
    h *= 2246822519u
    h ^= h >> 13
    h *= 3266489917u
    h ^= h >> 16
    return h


cdef object _fix_lz4_header_checksum(object data):
    """Kafka before 0.10 (magic 0) computed the LZ4 frame header checksum over the magic
    number as well (apache/kafka KafkaLZ4BlockOutputStream, KIP-57); rewrite it as the
    LZ4 frame format defines it. Returns None when the frame header is malformed."""
    cdef bytearray fixed = bytearray(data)
    cdef const uint8_t *p = <const uint8_t *>PyByteArray_AS_STRING(fixed)
    cdef Py_ssize_t n = PyByteArray_GET_SIZE(fixed)
    if n < 7 or pk_load_u32(p) != 0x04224D18:
        return None
    cdef Py_ssize_t desc = 2 + (8 if p[4] & 0x08 else 0) + (4 if p[4] & 0x01 else 0)
    if n < 4 + desc + 1:
        return None
    fixed[4 + desc] = (_xxh32_short(p + 4, <size_t>desc) >> 8) & 0xFF
    return fixed


cdef bytearray _decompress_into(object fn, object data, Py_ssize_t limit, Py_ssize_t pos, int codec):
    cdef Py_ssize_t capacity = min(limit, max(64 * 1024, 4 * len(data)))
    cdef bytearray out
    while True:
        out = bytearray(capacity)
        try:
            n = fn(data, out)
        except cramjam.DecompressionError as exc:
            if "whole buffer" not in str(exc):
                raise CorruptBatchError(f"{_CODEC_NAMES[codec]} data does not decompress: {exc}",
                                        "records", pos, pos + PK_BATCH_HEADER_SIZE) from None
            if capacity >= limit:
                raise RecordTooLargeError(f"{_CODEC_NAMES[codec]} records expand beyond "
                                          f"{limit} bytes", "records", pos,
                                          pos + PK_BATCH_HEADER_SIZE) from None
            capacity = min(limit, capacity * 4)
            continue
        del out[n:]
        return out


cdef bytearray _snappy_decompress(object data, Py_ssize_t limit, Py_ssize_t pos):
    cdef const uint8_t *p
    cdef Py_ssize_t n, at, block, total = 0
    mv = memoryview(data)
    try:
        if mv[:8] == _XERIAL_MAGIC and len(mv) >= 16:
            blocks = []
            at = 16
            n = len(mv)
            while at < n:
                if n - at < 4:
                    raise CorruptBatchError("truncated xerial snappy block length", "records",
                                            pos, pos + PK_BATCH_HEADER_SIZE)
                block = int.from_bytes(mv[at:at + 4], "big", signed=True)
                if block < 0 or block > n - at - 4:
                    raise CorruptBatchError("xerial snappy block length out of bounds", "records",
                                            pos, pos + PK_BATCH_HEADER_SIZE)
                blocks.append(mv[at + 4:at + 4 + block])
                at += 4 + block
        else:
            blocks = [mv]
        sizes = []
        for b in blocks:
            try:
                sizes.append(cramjam.snappy.decompress_raw_len(b))
            except Exception as exc:
                raise CorruptBatchError(f"snappy data does not decompress: {exc}", "records",
                                        pos, pos + PK_BATCH_HEADER_SIZE) from None
            total += sizes[-1]
            if total > limit:
                raise RecordTooLargeError(f"snappy records expand beyond {limit} bytes", "records",
                                          pos, pos + PK_BATCH_HEADER_SIZE)
        out = bytearray(total)
        at = 0
        with memoryview(out) as outv:
            for b, size in zip(blocks, sizes):
                try:
                    written = cramjam.snappy.decompress_raw_into(b, outv[at:at + size])
                except Exception as exc:
                    raise CorruptBatchError(f"snappy data does not decompress: {exc}", "records",
                                            pos, pos + PK_BATCH_HEADER_SIZE) from None
                if written != size:
                    raise CorruptBatchError("snappy block shorter than its stated length",
                                            "records", pos, pos + PK_BATCH_HEADER_SIZE)
                at += size
        return out
    finally:
        blocks = None
        mv.release()


cdef bytearray _decompress(int codec, object data, Py_ssize_t limit, Py_ssize_t pos, int magic):
    """Decompressed records of a batch / legacy wrapper, at most `limit` bytes."""
    if codec == CODEC_GZIP:
        return _decompress_into(cramjam.gzip.decompress_into, data, limit, pos, codec)
    if codec == CODEC_SNAPPY:
        return _snappy_decompress(data, limit, pos)
    if codec == CODEC_LZ4:
        try:
            return _decompress_into(cramjam.lz4.decompress_into, data, limit, pos, codec)
        except CorruptBatchError as exc:
            if magic != 0 or "headerChecksum" not in str(exc) or isinstance(exc, RecordTooLargeError):
                raise
            fixed = _fix_lz4_header_checksum(data)
            if fixed is None:
                raise
            return _decompress_into(cramjam.lz4.decompress_into, fixed, limit, pos, codec)
    if codec == CODEC_ZSTD and magic == 2:
        return _decompress_into(cramjam.zstd.decompress_into, data, limit, pos, codec)
    raise InvalidRecordError(f"compression codec {codec} is not valid for magic {magic}",
                             "attributes", pos, pos + (PK_BATCH_ATTRIBUTES if magic == 2 else 17))


cdef object _compress(int codec, object data):
    if codec == CODEC_GZIP:
        return cramjam.gzip.compress(data)
    if codec == CODEC_SNAPPY:
        # xerial framing, as the Java client writes it (snappy-java SnappyOutputStream)
        out = bytearray(_XERIAL_HEADER)
        with memoryview(data) as mv:
            for at in range(0, len(mv), _XERIAL_BLOCK_SIZE):
                block = bytes(cramjam.snappy.compress_raw(mv[at:at + _XERIAL_BLOCK_SIZE]))
                out += len(block).to_bytes(4, "big")
                out += block
        return out
    if codec == CODEC_LZ4:
        # LZ4 frame, independent blocks, no content checksum: what Kafka's
        # KafkaLZ4BlockInputStream reads (KIP-57); level 9 is Kafka's default (KIP-390)
        c = cramjam.lz4.Compressor(level=9, content_checksum=False, block_linked=False)
        c.compress(data)
        return c.finish()
    if codec == CODEC_ZSTD:
        return cramjam.zstd.compress(data, level=3)  # Kafka's default zstd level (KIP-390)
    raise ValueError(f"unknown compression codec {codec} (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")


# ---------------------------------------------------------------------------------------
# A growable C byte buffer for the builders

cdef struct _Buf:
    uint8_t *data
    Py_ssize_t length
    Py_ssize_t capacity


cdef int _reserve(_Buf *b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t capacity
    cdef void *p
    if b.length + extra <= b.capacity:
        return 0
    capacity = max(b.capacity * 2, b.length + extra, 256)
    p = PyMem_Realloc(b.data, <size_t>capacity)
    if p == NULL:
        raise MemoryError()
    b.data = <uint8_t *>p
    b.capacity = capacity
    return 0


cdef inline int _put(_Buf *b, const void *src, Py_ssize_t n) except -1:
    _reserve(b, n)
    memcpy(b.data + b.length, src, <size_t>n)
    b.length += n
    return 0


cdef inline int _put_varint(_Buf *b, int64_t v) except -1:
    _reserve(b, 10)
    b.length += <Py_ssize_t>pk_write_varlong(b.data + b.length, v)
    return 0


cdef inline int _put_u8(_Buf *b, uint8_t v) except -1:
    _reserve(b, 1)
    b.data[b.length] = v
    b.length += 1
    return 0


cdef inline int _put_u32(_Buf *b, uint32_t v) except -1:
    _reserve(b, 4)
    pk_store_u32(b.data + b.length, v)
    b.length += 4
    return 0


cdef inline int _put_u64(_Buf *b, uint64_t v) except -1:
    _reserve(b, 8)
    pk_store_u64(b.data + b.length, v)
    b.length += 8
    return 0


cdef int _put_span(_Buf *b, const uint8_t *p, int32_t n) except -1:
    """A v2 record field: varint length (-1 = null), then the bytes."""
    _put_varint(b, n)
    if n > 0:
        _put(b, p, n)
    return 0


cdef int _put_object(_Buf *b, object obj, bint allow_null, str what) except -1:
    """A v2 record field from a Python object: None, str (UTF-8) or any bytes-like."""
    cdef Py_buffer view
    if obj is None:
        if not allow_null:
            raise TypeError(f"{what} must not be None")
        _put_varint(b, -1)
        return 0
    if isinstance(obj, str):
        obj = (<str>obj).encode("utf-8")
    PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE)
    try:
        if view.len > 0x7FFFFFFF:
            raise ValueError(f"{what} longer than 2^31-1 bytes")
        _put_span(b, <const uint8_t *>view.buf, <int32_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return 0


cdef Py_ssize_t _record_begin(_Buf *b) except -1:
    """Leaves room for the record length varint (at most 5 bytes); returns the record start."""
    _reserve(b, 5)
    b.length += 5
    return b.length - 5


cdef int _record_end(_Buf *b, Py_ssize_t start) except -1:
    """Writes the length of the record body that follows `start + 5` and closes the gap."""
    cdef Py_ssize_t body = b.length - start - 5
    cdef uint8_t tmp[5]
    if body > 0x7FFFFFFF:
        raise ValueError("record larger than 2^31-1 bytes")
    cdef size_t n = pk_write_varint(tmp, <int32_t>body)
    memmove(b.data + start + n, b.data + start + 5, <size_t>body)
    memcpy(b.data + start, tmp, n)
    b.length -= <Py_ssize_t>(5 - n)
    return 0


cdef object _finish_batch(_Buf *area, int32_t count, int compression, int64_t base_offset,
                          int32_t partition_leader_epoch, int attributes, int64_t base_timestamp,
                          int64_t max_timestamp, int64_t producer_id, int producer_epoch,
                          int32_t base_sequence, int32_t last_offset_delta, bint as_bytearray):
    """Header + records area (compressed when asked) + CRC-32C as one batch."""
    cdef Py_ssize_t total
    cdef uint8_t *p
    if compression:
        payload = _compress(compression, PyBytes_FromStringAndSize(<const char *>area.data, area.length))
    else:
        payload = None
    cdef Py_ssize_t body = area.length if payload is None else len(payload)
    total = PK_BATCH_HEADER_SIZE + body
    if total - PK_BATCH_LOG_OVERHEAD > 0x7FFFFFFF:
        raise ValueError("batch larger than 2^31-1 bytes")
    out = bytearray(total)
    p = <uint8_t *>PyByteArray_AS_STRING(out)
    pk_store_u64(p + PK_BATCH_BASE_OFFSET, <uint64_t>base_offset)
    pk_store_u32(p + PK_BATCH_LENGTH, <uint32_t>(total - PK_BATCH_LOG_OVERHEAD))
    pk_store_u32(p + PK_BATCH_LEADER_EPOCH, <uint32_t>partition_leader_epoch)
    p[PK_BATCH_MAGIC] = 2
    pk_store_u16(p + PK_BATCH_ATTRIBUTES, <uint16_t>(attributes | compression))
    pk_store_u32(p + PK_BATCH_LAST_OFFSET_DELTA, <uint32_t>last_offset_delta)
    pk_store_u64(p + PK_BATCH_BASE_TIMESTAMP, <uint64_t>base_timestamp)
    pk_store_u64(p + PK_BATCH_MAX_TIMESTAMP, <uint64_t>max_timestamp)
    pk_store_u64(p + PK_BATCH_PRODUCER_ID, <uint64_t>producer_id)
    pk_store_u16(p + PK_BATCH_PRODUCER_EPOCH, <uint16_t>producer_epoch)
    pk_store_u32(p + PK_BATCH_BASE_SEQUENCE, <uint32_t>base_sequence)
    pk_store_u32(p + PK_BATCH_RECORDS_COUNT, <uint32_t>count)
    if payload is None:
        memcpy(p + PK_BATCH_HEADER_SIZE, area.data, <size_t>area.length)
    else:
        out[PK_BATCH_HEADER_SIZE:] = payload
        p = <uint8_t *>PyByteArray_AS_STRING(out)
    pk_store_u32(p + PK_BATCH_CRC, pk_crc32c(0, p + PK_BATCH_ATTRIBUTES,
                                             <size_t>(total - PK_BATCH_ATTRIBUTES)))
    return out if as_bytearray else bytes(out)


def build_batch(records, *, int64_t base_offset=0, int compression=0, int64_t producer_id=-1,
                int producer_epoch=-1, int32_t base_sequence=-1, int32_t partition_leader_epoch=-1,
                int timestamp_type=0, bint is_transactional=False, bint is_control=False,
                offset_deltas=None, int64_t last_offset_delta=-1):
    """One magic 2 batch holding `records`: a sequence of (key, value, timestamp_ms, headers)
    with key/value bytes-like or None, timestamp_ms an int (None = now) and headers a
    sequence of (str|bytes key, bytes-like|None value). Offset deltas are 0..n-1, or
    `offset_deltas` (one per record, strictly increasing, >= 0: a batch rewritten by log
    compaction keeps its records' offsets); last_offset_delta -1 = the last record's delta,
    else at least that (a compacted batch keeps its original offset range)."""
    cdef _Buf area
    cdef Py_ssize_t start
    cdef int32_t count = 0
    cdef int64_t ts, base_timestamp = 0, max_timestamp = -1
    cdef int64_t delta, previous_delta = -1
    if compression < 0 or compression > PK_CODEC_MAX:
        raise ValueError(f"unknown compression codec {compression} (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")
    if timestamp_type not in (0, 1):
        raise ValueError("timestamp_type is 0 (CreateTime) or 1 (LogAppendTime)")
    records = list(records)
    if not records:
        raise ValueError("a batch needs at least one record")
    if len(records) > 0x7FFFFFFF:
        raise ValueError("more than 2^31-1 records")
    if offset_deltas is not None:
        offset_deltas = list(offset_deltas)
        if len(offset_deltas) != len(records):
            raise ValueError(f"{len(offset_deltas)} offset deltas for {len(records)} records")
    area.data = NULL
    area.length = area.capacity = 0
    try:
        for record in records:
            if offset_deltas is None:
                delta = count
            else:
                delta = offset_deltas[count]
                if delta <= previous_delta or delta > 0x7FFFFFFF:
                    raise ValueError(f"offset delta {delta} of record {count} is not above "
                                     f"{previous_delta} and within int32")
            previous_delta = delta
            key, value, timestamp, headers = record
            ts = _time.time_ns() // 1000000 if timestamp is None else timestamp
            if count == 0:
                base_timestamp = max_timestamp = ts
            if ts > max_timestamp:
                max_timestamp = ts
            start = _record_begin(&area)
            _put_u8(&area, 0)                       # record attributes (unused by Kafka)
            _put_varint(&area, ts - base_timestamp)
            _put_varint(&area, delta)
            _put_object(&area, key, True, "key")
            _put_object(&area, value, True, "value")
            headers = () if headers is None else headers
            _put_varint(&area, len(headers))
            for hkey, hvalue in headers:
                _put_object(&area, hkey, False, "header key")
                _put_object(&area, hvalue, True, "header value")
            _record_end(&area, start)
            count += 1
        if last_offset_delta == -1:
            last_offset_delta = previous_delta
        elif last_offset_delta < previous_delta or last_offset_delta > 0x7FFFFFFF:
            raise ValueError(f"last_offset_delta {last_offset_delta} is below the last record's "
                             f"offset delta {previous_delta} or beyond int32")
        attributes = ((PK_ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
                      | (PK_ATTR_TRANSACTIONAL if is_transactional else 0)
                      | (PK_ATTR_CONTROL if is_control else 0))
        return _finish_batch(&area, count, compression, base_offset, partition_leader_epoch,
                             attributes, base_timestamp, max_timestamp, producer_id,
                             producer_epoch, base_sequence, <int32_t>last_offset_delta, False)
    finally:
        PyMem_Free(area.data)


# ---------------------------------------------------------------------------------------
# Reading: columnar decode and Record objects

@cython.final
cdef class Record:
    """One record as a consumer sees it. Batch-level fields are on `batch`."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly list headers
    cdef readonly BatchHeader batch

    def __init__(self):
        raise TypeError("Record objects come from iter_records / DecodedRecords")

    @property
    def timestamp_type(self) -> int:
        return 1 if self.batch.attributes & PK_ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_control(self) -> bool:
        return bool(self.batch.attributes & PK_ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.batch.attributes & PK_ATTR_TRANSACTIONAL)

    @property
    def producer_id(self) -> int:
        return self.batch.producer_id

    @property
    def producer_epoch(self) -> int:
        return self.batch.producer_epoch

    @property
    def partition_leader_epoch(self) -> int:
        return self.batch.partition_leader_epoch

    @property
    def sequence(self) -> int:
        """The record's producer sequence (-1 when the batch carries none)."""
        if self.batch.base_sequence < 0:
            return -1
        return (self.batch.base_sequence + (self.offset - self.batch.base_offset)) & 0x7FFFFFFF

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")


cdef inline int _push_q(array.array a, int64_t v) except -1:
    cdef Py_ssize_t n = len(a)
    array.resize_smart(a, n + 1)
    a.data.as_longlongs[n] = v
    return 0


cdef inline int _push_i(array.array a, int32_t v) except -1:
    cdef Py_ssize_t n = len(a)
    array.resize_smart(a, n + 1)
    a.data.as_ints[n] = v
    return 0


@cython.final
cdef class DecodedRecords:
    """Records of many batches as columns (see decode_records in records.pyi).

    Column i of every per-record array belongs to record i. Key, value and header bytes
    live in `data`; a span is (start, length) with length -1 for null.
    """
    cdef readonly array.array offsets
    cdef readonly array.array timestamps
    cdef readonly array.array batch_index
    cdef readonly array.array key_starts
    cdef readonly array.array key_lengths
    cdef readonly array.array value_starts
    cdef readonly array.array value_lengths
    cdef readonly array.array header_index
    cdef readonly array.array header_key_starts
    cdef readonly array.array header_key_lengths
    cdef readonly array.array header_value_starts
    cdef readonly array.array header_value_lengths
    cdef readonly list batches
    cdef readonly object data
    cdef readonly int64_t next_offset
    cdef readonly Py_ssize_t bytes_consumed
    cdef bytearray _blob

    def __cinit__(self):
        self.offsets = _array.array("q")
        self.timestamps = _array.array("q")
        self.batch_index = _array.array("i")
        self.key_starts = _array.array("q")
        self.key_lengths = _array.array("i")
        self.value_starts = _array.array("q")
        self.value_lengths = _array.array("i")
        self.header_index = _array.array("q", [0])
        self.header_key_starts = _array.array("q")
        self.header_key_lengths = _array.array("i")
        self.header_value_starts = _array.array("q")
        self.header_value_lengths = _array.array("i")
        self.batches = []
        self._blob = bytearray()
        self.data = b""

    def __init__(self):
        raise TypeError("DecodedRecords objects come from decode_records")

    cdef int _span(self, const uint8_t *p, int32_t n, array.array starts, array.array lengths) except -1:
        cdef Py_ssize_t at = PyByteArray_GET_SIZE(self._blob)
        if n < 0:
            _push_q(starts, -1)
            _push_i(lengths, -1)
            return 0
        PyByteArray_Resize(self._blob, at + n)
        memcpy(PyByteArray_AS_STRING(self._blob) + at, p, <size_t>n)
        _push_q(starts, at)
        _push_i(lengths, n)
        return 0

    cdef int _finish(self) except -1:
        self.data = bytes(self._blob)
        self._blob = bytearray()
        return 0

    def __len__(self):
        return len(self.offsets)

    @property
    def count(self) -> int:
        return len(self.offsets)

    cdef object _bytes_at(self, int64_t start, int32_t length):
        if length < 0:
            return None
        return self.data[start:start + length]

    def key(self, Py_ssize_t i):
        """Key of record i (bytes or None)."""
        return self._bytes_at(self.key_starts[i], self.key_lengths[i])

    def value(self, Py_ssize_t i):
        """Value of record i (bytes or None)."""
        return self._bytes_at(self.value_starts[i], self.value_lengths[i])

    def headers(self, Py_ssize_t i):
        """Headers of record i as a list of (str, bytes | None)."""
        cdef int64_t k
        out = []
        for k in range(self.header_index[i], self.header_index[i + 1]):
            name = self._bytes_at(self.header_key_starts[k], self.header_key_lengths[k])
            out.append((name.decode("utf-8", "replace"),
                        self._bytes_at(self.header_value_starts[k], self.header_value_lengths[k])))
        return out

    def record(self, Py_ssize_t i):
        """Record i as a Record object."""
        cdef Py_ssize_t n = len(self.offsets)
        if i < 0:
            i += n
        if i < 0 or i >= n:
            raise IndexError("record index out of range")
        cdef Record r = Record.__new__(Record)
        r.offset = self.offsets[i]
        r.timestamp = self.timestamps[i]
        r.key = self.key(i)
        r.value = self.value(i)
        r.headers = self.headers(i)
        r.batch = self.batches[self.batch_index[i]]
        return r

    def __getitem__(self, Py_ssize_t i):
        return self.record(i)

    def __iter__(self):
        cdef Py_ssize_t i
        for i in range(len(self.offsets)):
            yield self.record(i)

    def __repr__(self):
        return (f"DecodedRecords(count={len(self.offsets)}, batches={len(self.batches)}, "
                f"next_offset={self.next_offset}, bytes_consumed={self.bytes_consumed})")


cdef int _decode_area(DecodedRecords out, const uint8_t *area, Py_ssize_t length,
                      const pk_batch_header *h, Py_ssize_t batch_no, int64_t start_offset,
                      Py_ssize_t pos, bint compressed) except -1:
    """Appends the records of one batch's (decompressed) records area to `out`."""
    cdef const uint8_t *p = area
    cdef const uint8_t *end = area + length
    cdef const uint8_t *hp
    cdef pk_record r
    cdef pk_batch_error err
    cdef int64_t prev_delta = -1, offset, timestamp
    cdef int32_t i, k, hk, hv
    cdef size_t n
    cdef bint log_append = (h.attributes & PK_ATTR_TIMESTAMP_TYPE) != 0
    where = " of the decompressed records" if compressed else ""
    for i in range(h.records_count):
        if p == end:
            raise InvalidRecordError(f"fewer records than records_count ({i} of {h.records_count})",
                                     "records_count", pos, pos + PK_BATCH_RECORDS_COUNT)
        if pk_record_parse(area, p, end, &r, &err) != PK_BATCH_OK:
            raise InvalidRecordError(f"{err.message.decode('ascii', 'replace')} (at byte "
                                     f"{err.offset}{where})", err.field.decode("ascii"), pos,
                                     pos + PK_BATCH_HEADER_SIZE + (0 if compressed else <Py_ssize_t>err.offset))
        if r.offset_delta <= prev_delta or r.offset_delta > h.last_offset_delta:
            raise InvalidRecordError("offset_delta not increasing or beyond last_offset_delta",
                                     "record.offset_delta", pos,
                                     pos + PK_BATCH_HEADER_SIZE + (0 if compressed else (p - area)))
        prev_delta = r.offset_delta
        offset = h.base_offset + r.offset_delta
        if offset >= start_offset:
            timestamp = h.max_timestamp if log_append else h.base_timestamp + r.timestamp_delta
            _push_q(out.offsets, offset)
            _push_q(out.timestamps, timestamp)
            _push_i(out.batch_index, <int32_t>batch_no)
            out._span(area + r.key_pos, r.key_length, out.key_starts, out.key_lengths)
            out._span(area + r.value_pos, r.value_length, out.value_starts, out.value_lengths)
            # pk_record_parse has checked every header span against the record end
            hp = area + r.headers_pos
            for k in range(r.headers_count):
                n = pk_read_varint(hp, end, &hk)
                out._span(hp + n, hk, out.header_key_starts, out.header_key_lengths)
                hp += n + hk
                n = pk_read_varint(hp, end, &hv)
                out._span(hp + n, hv, out.header_value_starts, out.header_value_lengths)
                hp += n + (hv if hv > 0 else 0)
            _push_q(out.header_index, len(out.header_key_starts))
        p += r.size
    if p != end:
        raise InvalidRecordError("bytes left after records_count records", "records_count", pos,
                                 pos + PK_BATCH_HEADER_SIZE + (0 if compressed else (p - area)))
    return 0


cdef Py_ssize_t _decode_batches(DecodedRecords out, object buf, Py_ssize_t start, int64_t start_offset,
                                bint include_control, Py_ssize_t max_batches, Py_ssize_t limit) except -2:
    """Decodes up to max_batches whole batches of buf[start:] into `out` (all when
    max_batches < 0); returns the position after the last whole batch."""
    cdef Py_buffer view
    cdef pk_batch_header h
    cdef pk_batch_error err
    cdef Py_ssize_t pos = start, total, done = 0
    cdef const uint8_t *p
    cdef const uint8_t *a
    cdef int rc
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        if start < 0 or start > view.len:
            raise ValueError(f"start {start} outside a buffer of {view.len} bytes")
        p = <const uint8_t *>view.buf
        while pos < view.len and done != max_batches:
            # header, length and CRC only; the record walk below checks the framing
            rc = pk_batch_validate(p + pos, <size_t>(view.len - pos), 0, 0, &h, &err)
            if rc == PK_BATCH_INCOMPLETE:
                break  # a fetch may end inside a batch: the tail is dropped, as clients do
            if rc != PK_BATCH_OK:
                _raise_batch_error(rc, &err, p + pos, view.len - pos, pos, 0)
            total = <Py_ssize_t>h.batch_length + PK_BATCH_LOG_OVERHEAD
            done += 1
            if (h.attributes & PK_ATTR_CONTROL) and not include_control:
                pos += total
                out.next_offset = max(out.next_offset, h.base_offset + h.last_offset_delta + 1)
                continue
            out.batches.append(_header_object(&h))
            if h.attributes & PK_ATTR_CODEC_MASK:
                compressed = PyBytes_FromStringAndSize(<const char *>p + pos + PK_BATCH_HEADER_SIZE,
                                                       total - PK_BATCH_HEADER_SIZE)
                area = _decompress(h.attributes & PK_ATTR_CODEC_MASK, compressed, limit, pos, 2)
                a = <const uint8_t *>PyByteArray_AS_STRING(area)
                _decode_area(out, a, PyByteArray_GET_SIZE(area), &h, len(out.batches) - 1,
                             start_offset, pos, True)
            else:
                _decode_area(out, p + pos + PK_BATCH_HEADER_SIZE, total - PK_BATCH_HEADER_SIZE,
                             &h, len(out.batches) - 1, start_offset, pos, False)
            out.next_offset = max(out.next_offset, h.base_offset + h.last_offset_delta + 1)
            pos += total
        out.bytes_consumed += pos - start
        return pos
    finally:
        PyBuffer_Release(&view)


def decode_records(buf, int64_t start_offset=0, *, bint include_control=False,
                   Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Decodes every whole batch of buf (a fetch response's records) into columns; see
    records.pyi."""
    cdef DecodedRecords out = DecodedRecords.__new__(DecodedRecords)
    out.next_offset = start_offset
    _decode_batches(out, buf, 0, start_offset, include_control, -1, max_decompressed_size)
    out._finish()
    return out


def iter_records(buf, Py_ssize_t start=0, *,
                 Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Record objects of every whole batch in buf[start:], control records included; stops
    at a partial trailing batch. The buffer is only held while one batch is decoded."""
    cdef DecodedRecords out
    cdef Py_ssize_t pos = start, nxt
    while True:
        out = DecodedRecords.__new__(DecodedRecords)
        out.next_offset = INT64_MIN
        nxt = _decode_batches(out, buf, pos, INT64_MIN, True, 1, max_decompressed_size)
        if nxt == pos:
            return
        out._finish()
        pos = nxt
        yield from out


# ---------------------------------------------------------------------------------------
# Legacy message sets (magic 0 and 1)
#
# A message set is a sequence of (apache/kafka LegacyRecord), big-endian:
#
#   offset  size  field
#    0      8     offset          absolute; inside a magic 1 wrapper relative (0..n-1)
#    8      4     message_size    bytes after this field (crc .. end of value)
#   12      4     crc             CRC-32 (IEEE) of bytes 16 .. end of message
#   16      1     magic           0 or 1 (same byte as the v2 magic)
#   17      1     attributes      bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4),
#                                 bit 3 timestamp type (magic 1: 1 = LogAppendTime)
#   18      8     timestamp       magic 1 only
#   18/26   4     key_length      -1 = null, then the key
#   ..      4     value_length    -1 = null, then the value
#
# A compressed message ("wrapper") carries a whole inner message set, compressed, as its
# value. Inner messages must be uncompressed and have the wrapper's magic. A magic 1 wrapper
# with LogAppendTime gives all its inner messages the wrapper's timestamp.

cdef enum:
    LEGACY_OFFSET = 0
    LEGACY_SIZE = 8
    LEGACY_CRC = 12
    LEGACY_MAGIC = 16
    LEGACY_ATTRIBUTES = 17
    LEGACY_TIMESTAMP = 18
    LEGACY_LOG_OVERHEAD = 12
    # crc + magic + attributes + key_length + value_length
    LEGACY_V0_MIN_SIZE = 14
    # plus the timestamp
    LEGACY_V1_MIN_SIZE = 22


def is_legacy(buf):
    """True when buf starts with a magic 0 or 1 message (the magic byte sits at byte 16
    in both formats)."""
    cdef Py_buffer view
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return view.len > LEGACY_MAGIC and (<const uint8_t *>view.buf)[LEGACY_MAGIC] in (0, 1)
    finally:
        PyBuffer_Release(&view)


cdef struct _LegacyState:
    _Buf area
    int32_t count
    int64_t base_timestamp
    int64_t max_timestamp


cdef int _legacy_fail(type cls, str message, str field, Py_ssize_t pos, Py_ssize_t field_offset,
                      str context) except -1:
    raise cls(message + context, field, pos, field_offset)


cdef int _convert_message_set(_LegacyState *st, const uint8_t *p, Py_ssize_t length, Py_ssize_t base,
                              int wrapper_magic, int64_t wrapper_timestamp, bint wrapper_log_append,
                              Py_ssize_t limit, str context) except -1:
    """Validates the message set p[0:length] and appends its records (as v2 records) to st.
    `base` is the absolute position of p in the caller's buffer (for error offsets); inner
    sets (wrapper_magic >= 0) report positions at the wrapper."""
    cdef Py_ssize_t pos = 0, total, at, field_pos, key_at
    cdef int32_t size, klen, vlen
    cdef int magic, attributes, codec
    cdef int64_t timestamp
    cdef bint inner = wrapper_magic >= 0
    cdef Py_ssize_t start
    while pos < length:
        field_pos = base if inner else base + pos
        if length - pos < LEGACY_LOG_OVERHEAD + LEGACY_V0_MIN_SIZE:
            _legacy_fail(CorruptBatchError, f"truncated message: {length - pos} bytes left",
                         "message_size", field_pos, field_pos + LEGACY_SIZE, context)
        size = <int32_t>pk_load_u32(p + pos + LEGACY_SIZE)
        magic = p[pos + LEGACY_MAGIC]
        if magic > 1:
            _legacy_fail(CorruptBatchError, f"magic {magic} in a legacy message set",
                         "magic", field_pos, field_pos + LEGACY_MAGIC, context)
        if size < (LEGACY_V1_MIN_SIZE if magic == 1 else LEGACY_V0_MIN_SIZE):
            _legacy_fail(CorruptBatchError, f"message_size {size} smaller than a message",
                         "message_size", field_pos, field_pos + LEGACY_SIZE, context)
        total = <Py_ssize_t>size + LEGACY_LOG_OVERHEAD
        if total > length - pos:
            _legacy_fail(CorruptBatchError, f"truncated message: message_size promises {total} "
                         f"bytes, {length - pos} left", "message_size", field_pos,
                         field_pos + LEGACY_SIZE, context)
        if pk_crc32(0, p + pos + LEGACY_MAGIC, <size_t>(total - LEGACY_MAGIC)) != pk_load_u32(p + pos + LEGACY_CRC):
            _legacy_fail(CorruptBatchError, "CRC-32 mismatch", "crc", field_pos,
                         field_pos + LEGACY_CRC, context)
        if inner and magic != wrapper_magic:
            _legacy_fail(InvalidRecordError, f"inner message has magic {magic}, its wrapper "
                         f"{wrapper_magic}", "magic", field_pos, field_pos + LEGACY_MAGIC, context)
        attributes = p[pos + LEGACY_ATTRIBUTES]
        codec = attributes & 0x07
        if codec > CODEC_LZ4:
            _legacy_fail(InvalidRecordError, f"compression codec {codec} is not valid for "
                         f"magic {magic}", "attributes", field_pos, field_pos + LEGACY_ATTRIBUTES, context)
        if inner and codec:
            _legacy_fail(InvalidRecordError, "compressed message inside a compressed message",
                         "attributes", field_pos, field_pos + LEGACY_ATTRIBUTES, context)
        at = pos + LEGACY_TIMESTAMP
        timestamp = -1  # magic 0 has no timestamp: Kafka up-converts it to NO_TIMESTAMP
        if magic == 1:
            timestamp = <int64_t>pk_load_u64(p + at)
            at += 8
            if inner and wrapper_log_append:
                timestamp = wrapper_timestamp
        klen = <int32_t>pk_load_u32(p + at)
        if klen < -1 or klen > pos + total - at - 8:
            _legacy_fail(CorruptBatchError, "key length out of bounds", "key", field_pos,
                         field_pos + (at - pos), context)
        at += 4
        key_at = at
        at += klen if klen > 0 else 0
        vlen = <int32_t>pk_load_u32(p + at)
        if vlen < -1 or (vlen if vlen > 0 else 0) != pos + total - at - 4:
            _legacy_fail(CorruptBatchError, "value length does not match message_size",
                         "value", field_pos, field_pos + (at - pos), context)
        at += 4
        if codec:
            if vlen < 0:
                _legacy_fail(InvalidRecordError, "compressed message without a value", "value",
                             field_pos, field_pos + (at - 4 - pos), context)
            # the budget covers all wrappers together: many small wrappers must not add up
            # to more than one large one could
            inner_set = _decompress(codec, PyBytes_FromStringAndSize(<const char *>p + at, vlen),
                                    max(limit - st.area.length, 0), field_pos, magic)
            _convert_message_set(st, <const uint8_t *>PyByteArray_AS_STRING(inner_set),
                                 PyByteArray_GET_SIZE(inner_set), field_pos, magic, timestamp,
                                 magic == 1 and (attributes & 0x08) != 0, limit,
                                 f" (inside the {_CODEC_NAMES[codec]} message at byte {field_pos})")
        else:
            if st.count == 0x7FFFFFFF:
                raise InvalidRecordError("more than 2^31-1 records", "message_size", field_pos,
                                         field_pos + LEGACY_SIZE)
            if st.count == 0:
                st.base_timestamp = st.max_timestamp = timestamp
            if timestamp > st.max_timestamp:
                st.max_timestamp = timestamp
            start = _record_begin(&st.area)
            _put_u8(&st.area, 0)
            _put_varint(&st.area, timestamp - st.base_timestamp)
            _put_varint(&st.area, st.count)
            _put_span(&st.area, p + key_at, klen)
            _put_span(&st.area, p + at, vlen)
            _put_varint(&st.area, 0)  # legacy messages have no headers
            _record_end(&st.area, start)
            st.count += 1
            if st.area.length > limit:
                raise RecordTooLargeError(f"converted records exceed {limit} bytes", "message_size",
                                          field_pos, field_pos + LEGACY_SIZE)
        pos += total
    return 0


def convert_legacy(buf, *, Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Validates a complete magic 0/1 message set (CRC-32 of every message, wrappers
    decompressed) and returns its records as one uncompressed magic 2 batch (a bytearray,
    empty for an empty set). Offsets are renumbered 0..n-1 as on Kafka's produce path
    (assign_offsets sets the real ones); timestamps are kept (-1 for magic 0). The records
    area of the result is bounded by max_decompressed_size (RecordTooLargeError)."""
    cdef Py_buffer view
    cdef _LegacyState st
    st.area.data = NULL
    st.area.length = st.area.capacity = 0
    st.count = 0
    st.base_timestamp = -1
    st.max_timestamp = -1
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        _convert_message_set(&st, <const uint8_t *>view.buf, view.len, 0, -1, -1, False,
                             max_decompressed_size, "")
    finally:
        PyBuffer_Release(&view)
    try:
        if st.count == 0:
            return bytearray()
        return _finish_batch(&st.area, st.count, 0, 0, -1, 0, st.base_timestamp, st.max_timestamp,
                             -1, -1, -1, st.count - 1, True)
    finally:
        PyMem_Free(st.area.data)


def to_legacy(buf, int magic, *, Py_ssize_t max_decompressed_size=DEFAULT_MAX_DECOMPRESSED_SIZE):
    """Down-converts the whole magic 2 batches of buf to an uncompressed magic 0/1 message
    set for old Fetch versions: absolute offsets, magic 1 timestamps (LogAppendTime batches
    keep that type), headers dropped and control batches skipped (as apache/kafka
    RecordsUtil.downConvert); a partial trailing batch is dropped."""
    cdef DecodedRecords d
    cdef _Buf out
    cdef Py_ssize_t i, start
    cdef int32_t klen, vlen
    cdef int attributes
    cdef const uint8_t *data
    cdef BatchHeader batch
    if magic not in (0, 1):
        raise ValueError("to_legacy converts to magic 0 or 1")
    d = decode_records(buf, INT64_MIN, include_control=False,
                       max_decompressed_size=max_decompressed_size)
    out.data = NULL
    out.length = out.capacity = 0
    data = <const uint8_t *>(<bytes>d.data)
    try:
        for i in range(len(d.offsets)):
            klen = d.key_lengths.data.as_ints[i]
            vlen = d.value_lengths.data.as_ints[i]
            batch = <BatchHeader>d.batches[d.batch_index.data.as_ints[i]]
            attributes = 0x08 if magic == 1 and (batch.attributes & PK_ATTR_TIMESTAMP_TYPE) else 0
            start = out.length
            _put_u64(&out, <uint64_t>d.offsets.data.as_longlongs[i])
            _put_u32(&out, 0)   # message_size, written below
            _put_u32(&out, 0)   # crc, written below
            _put_u8(&out, <uint8_t>magic)
            _put_u8(&out, <uint8_t>attributes)
            if magic == 1:
                _put_u64(&out, <uint64_t>d.timestamps.data.as_longlongs[i])
            _put_u32(&out, <uint32_t>klen)
            if klen > 0:
                _put(&out, data + d.key_starts.data.as_longlongs[i], klen)
            _put_u32(&out, <uint32_t>vlen)
            if vlen > 0:
                _put(&out, data + d.value_starts.data.as_longlongs[i], vlen)
            pk_store_u32(out.data + start + LEGACY_SIZE, <uint32_t>(out.length - start - LEGACY_LOG_OVERHEAD))
            pk_store_u32(out.data + start + LEGACY_CRC,
                         pk_crc32(0, out.data + start + LEGACY_MAGIC, <size_t>(out.length - start - LEGACY_MAGIC)))
        return PyBytes_FromStringAndSize(<const char *>out.data, out.length)
    finally:
        PyMem_Free(out.data)
