# cython: language_level=3
"""Produce and Fetch fast paths (apache/kafka ProduceRequest.json / ProduceResponse.json,
v0-v13; FetchRequest.json / FetchResponse.json, v0-v18): compiled walks of Produce and
Fetch request bodies and compiled Produce and Fetch response encoders.

Each gives exactly what the generic table-driven codec (pykfk.protocol.codec) gives for the
same bytes or the same response body; tests/protocol/test_fast_path_wire.py and
test_fast_path_fetch.py check this on every version, hostile and truncated input included
(ProtocolError in the same cases).
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Check, PyDict_GetItemWithError, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from _out cimport Out as _Out, put_be as _put_be, put_count as _put_count, put_uvarint as _put_uvarint, reserve as _reserve

from uuid import UUID

from pykfk._core.errors import ProtocolError
from pykfk._core.regions import FileRegion
from pykfk._core.structs import Struct

# Record data at least this large is passed through as its own chunk instead of being
# copied into the response buffer (a copy of a few KiB is cheaper than an extra write).
# The generic codec (pykfk.protocol.types) uses the same threshold.
INLINE_RECORDS_MAX = 16 * 1024
# The null topic id (Fetch v13+ answers for topics known by name only).
ZERO_UUID = UUID(int=0)
# Fetch v18 high_watermark default: the fetching replica does not report one.
cdef object INT64_MAX = 2**63 - 1

# Versions this module walks (ProduceRequest.json "validVersions" as declared in
# pykfk.protocol.messages.produce) and the first flexible one (KIP-482).
PRODUCE_MIN_VERSION = 0
PRODUCE_MAX_VERSION = 13
PRODUCE_FLEXIBLE_FROM = 9
# Produce v10+ answers carry the tagged current_leader and node_endpoints (KIP-951);
# v13+ names topics by id (KIP-516).
PRODUCE_LEADER_HINTS_FROM = 10
PRODUCE_TOPIC_IDS_FROM = 13


# ---------------------------------------------------------------------------------------
# Request walk
#
#   ProduceRequest body (after the request header)
#     transactional_id   nullable string           v3+
#     acks               int16
#     timeout_ms         int32
#     topic_data         array of
#       name             string                     v0-12
#       topic_id         uuid (16 bytes)            v13+
#       partition_data   array of
#         index          int32
#         records        nullable records           (a view of the frame, never copied)
#         [tagged fields]                            v9+
#       [tagged fields]                              v9+
#     [tagged fields]                                v9+
#
#   classic (v0-v8): string int16 length (-1 null), records int32 length (-1 null),
#                    array int32 count
#   compact (v9+):   string/records uvarint length+1 (0 null), array uvarint count+1
#   tagged fields:   uvarint count, then (uvarint tag, uvarint size, size bytes) each;
#                    Produce declares no tags, so every one is skipped (as Kafka does)

cdef struct _Cursor:
    const uint8_t* data
    Py_ssize_t pos
    Py_ssize_t end


cdef int _truncated(_Cursor* c, Py_ssize_t need) except -1:
    raise ProtocolError(
        f"truncated: {need} bytes needed at byte {c.pos}, {c.end - c.pos} left")


cdef inline int _need(_Cursor* c, Py_ssize_t n) except -1:
    if c.end - c.pos < n:
        _truncated(c, n)
    return 0


cdef inline int16_t _int16(_Cursor* c) except? -1:
    _need(c, 2)
    cdef const uint8_t* p = c.data + c.pos
    c.pos += 2
    return <int16_t>((<uint32_t>p[0] << 8) | p[1])


cdef inline int32_t _int32(_Cursor* c) except? -1:
    _need(c, 4)
    cdef const uint8_t* p = c.data + c.pos
    c.pos += 4
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef int64_t _uvarint(_Cursor* c) except -1:
    """Unsigned varint of at most 5 bytes holding a 32-bit value (ByteUtils.readUnsignedVarint)."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        _need(c, 1)
        b = c.data[c.pos]
        c.pos += 1
        value |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                raise ProtocolError("unsigned varint does not fit in 32 bits")
            return <int64_t>value
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes")


cdef inline int64_t _length(_Cursor* c, bint compact, bint is_string) except? -2:
    """A length or count prefix; -1 means null."""
    if compact:
        return _uvarint(c) - 1
    if is_string:
        return _int16(c)
    return _int32(c)


cdef object _string(_Cursor* c, bint compact, bint nullable):
    cdef Py_ssize_t start = c.pos
    cdef int64_t n = _length(c, compact, True)
    if n < 0:
        if n == -1 and nullable:
            return None
        if n == -1:
            raise ProtocolError(f"null string at byte {c.pos} in a non-nullable field")
        raise ProtocolError(f"negative string length {n} at byte {start}")
    if n > c.end - c.pos:
        raise ProtocolError(f"length {n} at byte {c.pos} runs past the end of the frame")
    try:
        text = PyUnicode_DecodeUTF8(<const char*>(c.data + c.pos), <Py_ssize_t>n, "strict")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"string at byte {c.pos} is not valid UTF-8") from exc
    c.pos += <Py_ssize_t>n
    return text


cdef Py_ssize_t _count(_Cursor* c, bint compact, Py_ssize_t min_size) except -1:
    """A non-nullable array count, bounded by the bytes left at min_size bytes an element."""
    cdef int64_t n = _length(c, compact, False)
    if n < 0:
        if n == -1:
            raise ProtocolError(f"null array at byte {c.pos} in a non-nullable field")
        raise ProtocolError(f"negative array count {n} at byte {c.pos}")
    if n * min_size > c.end - c.pos:
        raise ProtocolError(f"array count {n} at byte {c.pos} exceeds the bytes left")
    return <Py_ssize_t>n


cdef int _skip_tagged(_Cursor* c) except -1:
    cdef int64_t count = _uvarint(c)
    cdef int64_t size
    cdef int64_t i
    if count * 2 > c.end - c.pos:
        raise ProtocolError(f"tagged field count {count} at byte {c.pos} exceeds the bytes left")
    for i in range(count):
        _uvarint(c)  # tag
        size = _uvarint(c)
        if size > c.end - c.pos:
            raise ProtocolError(f"tagged field of {size} bytes runs past the frame")
        c.pos += <Py_ssize_t>size
    return 0


# ---------------------------------------------------------------------------------------
# Request header (apache/kafka RequestHeader.json), after the size prefix
#
#   api_key          int16     offset 0
#   api_version      int16     offset 2
#   correlation_id   int32     offset 4
#   client_id        int16 length + UTF-8, -1 = null (classic even in flexible versions)
#   [tagged fields]  header v2 only (flexible request versions)

def cut_frames(buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t limit):
    """The request frames complete in ``buf[start:end]`` (each a 4-byte big-endian size,
    then that many bytes of body), cut in one call: ``(bodies, next)``, ``bodies`` a list
    of bytearray copies of the bodies (a request outlives the read buffer it came in),
    ``next`` the offset of the first byte not cut. Stops at a frame not complete yet and
    before one whose size is negative or above ``limit``: the caller reads that prefix
    again and decides (wait for more bytes, or close the connection)."""
    cdef Py_buffer pybuf
    cdef const uint8_t* p
    cdef int32_t size
    cdef list bodies = []
    PyObject_GetBuffer(buf, &pybuf, PyBUF_SIMPLE)
    try:
        if start < 0 or start > end or end > pybuf.len:
            raise ValueError(f"bytes {start}-{end} outside a buffer of {pybuf.len}")
        p = <const uint8_t*>pybuf.buf
        while end - start >= 4:
            size = <int32_t>((<uint32_t>p[start] << 24) | (<uint32_t>p[start + 1] << 16)
                             | (<uint32_t>p[start + 2] << 8) | <uint32_t>p[start + 3])
            if size < 0 or size > limit or end - start - 4 < size:
                break
            bodies.append(PyByteArray_FromStringAndSize(<const char*>(p + start + 4), size))
            start += 4 + size
        return bodies, start
    finally:
        PyBuffer_Release(&pybuf)


def decode_request_header(frame, bint flexible):
    """``(client_id, body_offset)`` of the request header at the start of ``frame`` (no
    size prefix); ``flexible`` says whether the request version uses header v2. The same
    values and failures (ProtocolError) as ``pykfk.protocol.framing.decode_request_header``.
    """
    cdef Py_buffer pybuf
    cdef _Cursor c
    PyObject_GetBuffer(frame, &pybuf, PyBUF_SIMPLE)
    try:
        if pybuf.len < 10:
            raise ProtocolError(f"request header truncated: {pybuf.len} bytes")
        c.data = <const uint8_t*>pybuf.buf
        c.pos = 8
        c.end = pybuf.len
        try:
            client_id = _string(&c, False, True)
            if flexible:
                _skip_tagged(&c)
        except ProtocolError as exc:
            raise ProtocolError(f"request header: {exc}") from None
        return client_id, c.pos
    finally:
        PyBuffer_Release(&pybuf)


def decode_produce(frame, Py_ssize_t offset, int version):
    """Decode the ProduceRequest body of ``frame`` (a request without its size prefix;
    the body runs from ``offset`` to the end) at ``version`` (0-13).

    Returns ``(transactional_id, acks, timeout_ms, [(topic, [(partition, records)])])``
    where ``records`` is a memoryview slice of ``frame`` (None for null records),
    ``topic`` the name (v0-12) or the topic id as a UUID (v13+) and
    ``transactional_id`` None before v3. Raises ProtocolError for bytes that do not
    decode (truncated, bad lengths or counts, invalid UTF-8, trailing bytes) and
    UnsupportedVersionError-free ValueError for a version outside 0-13. The frame's
    buffer export is released before returning; the returned views keep it alive.
    """
    if version < PRODUCE_MIN_VERSION or version > PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is outside {PRODUCE_MIN_VERSION}-{PRODUCE_MAX_VERSION}")
    cdef object view = frame if type(frame) is memoryview else memoryview(frame)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    cdef Py_buffer pybuf
    PyObject_GetBuffer(view, &pybuf, PyBUF_SIMPLE)
    try:
        if offset < 0 or offset > pybuf.len:
            raise ValueError(f"body offset {offset} outside a frame of {pybuf.len} bytes")
        try:
            return _walk_produce(view, <const uint8_t*>pybuf.buf, offset, pybuf.len, version)
        except ProtocolError as exc:
            raise ProtocolError(f"Produce v{version} request: {exc}") from None
    finally:
        PyBuffer_Release(&pybuf)


cdef object _walk_produce(object view, const uint8_t* data, Py_ssize_t offset, Py_ssize_t size,
                          int version):
    cdef _Cursor c
    c.data = data
    c.pos = offset
    c.end = size
    cdef bint compact = version >= PRODUCE_FLEXIBLE_FROM
    cdef bint topic_ids = version >= PRODUCE_TOPIC_IDS_FROM
    # Least bytes of one topic / one partition entry (bounds counts before any loop):
    # classic name 2 + count 4 / index 4 + length 4; compact name 1 (an id 16) + count 1
    # + tags 1 / index 4 + length 1 + tags 1.
    cdef Py_ssize_t topic_min = (18 if topic_ids else 3) if compact else 6
    cdef Py_ssize_t partition_min = 6 if compact else 8
    cdef Py_ssize_t n_topics, n_partitions, t, p
    cdef int32_t index
    cdef int64_t n
    cdef Py_ssize_t start

    transactional_id = _string(&c, compact, True) if version >= 3 else None
    cdef int16_t acks = _int16(&c)
    cdef int32_t timeout_ms = _int32(&c)
    n_topics = _count(&c, compact, topic_min)
    topics = []
    for t in range(n_topics):
        name = _uuid(&c) if topic_ids else _string(&c, compact, False)
        n_partitions = _count(&c, compact, partition_min)
        partitions = []
        for p in range(n_partitions):
            index = _int32(&c)
            start = c.pos
            n = _length(&c, compact, False)
            if n < 0:
                if n != -1:
                    raise ProtocolError(f"negative bytes length {n} at byte {start}")
                records = None
            else:
                if n > c.end - c.pos:
                    raise ProtocolError(f"length {n} at byte {c.pos} runs past the end of the frame")
                records = view[c.pos:c.pos + <Py_ssize_t>n]
                c.pos += <Py_ssize_t>n
            if compact:
                _skip_tagged(&c)
            partitions.append((index, records))
        if compact:
            _skip_tagged(&c)
        topics.append((name, partitions))
    if compact:
        _skip_tagged(&c)
    if c.pos != c.end:
        raise ProtocolError(f"{c.end - c.pos} trailing bytes")
    return (transactional_id, acks, timeout_ms, topics)


# ---------------------------------------------------------------------------------------
# Response encoder
#
#   frame: int32 size, int32 correlation_id, [tagged fields: one 0 byte]  v9+ (header v1)
#   ProduceResponse body
#     responses                 array of
#       name                    string                v0-12
#       topic_id                uuid (16 bytes)       v13+
#       partition_responses     array of
#         index                 int32
#         error_code            int16
#         base_offset           int64
#         log_append_time_ms    int64                 v2+ (default -1)
#         log_start_offset      int64                 v5+ (default -1)
#         record_errors         array of              v8+
#           batch_index         int32
#           batch_index_error_message  nullable string
#           [tagged fields]                            v9+
#         error_message         nullable string       v8+
#         [tagged fields]       current_leader 0      v10+ (leader_id int32, leader_epoch
#                                                     int32, tags; when not None)
#       [tagged fields]                                v9+
#     throttle_time_ms          int32                 v1+ (default 0)
#     [tagged fields]           node_endpoints 0      v10+ (node_id int32, host string,
#                                                     port int32, rack nullable string,
#                                                     tags; when not empty)
# Every other tagged section is the single byte 0.

cdef int _put_string(_Out* o, object value, bint compact, bint nullable) except -1:
    cdef bytes raw
    cdef Py_ssize_t n
    if value is None:
        if not nullable:
            raise ValueError("None for a non-nullable string")
        if compact:
            return _put_be(o, 0, 1)
        return _put_be(o, 0xFFFF, 2)
    raw = value.encode("utf-8")
    n = len(raw)
    if compact:
        _put_uvarint(o, <uint64_t>(n + 1))
    else:
        if n > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        _put_be(o, <uint64_t>n, 2)
    _reserve(o, n)
    memcpy(o.data + o.len, <const char*>raw, <size_t>n)
    o.len += n
    return 0


cdef inline int _put_int(_Out* o, object value, int width) except -1:
    # Range as struct.pack's signed formats (h, i, q) would enforce.
    cdef int64_t v
    if width == 8:
        v = value
    else:
        v = value
        if width == 2 and not (-0x8000 <= v <= 0x7FFF):
            raise OverflowError(f"{value} does not fit in int16")
        if width == 4 and not (-0x80000000 <= v <= 0x7FFFFFFF):
            raise OverflowError(f"{value} does not fit in int32")
    return _put_be(o, <uint64_t>v, width)


cdef int _open_frame(_Out* o, Py_ssize_t cap, int32_t correlation_id, bint compact) except -1:
    """A response frame's start in a fresh buffer of ``cap`` bytes: the size (patched by
    ``_close_frame``), the correlation id and, for flexible versions, the response header
    v1's empty tagged section. The caller frees ``o.data``."""
    o.cap = cap
    o.len = 0
    o.data = <uint8_t*>PyMem_Malloc(<size_t>o.cap)
    if o.data == NULL:
        raise MemoryError()
    _put_be(o, 0, 4)
    _put_be(o, <uint64_t><uint32_t>correlation_id, 4)
    if compact:
        _put_be(o, 0, 1)
    return 0


cdef int _close_frame(_Out* o, Py_ssize_t size) except -1:
    """Writes the frame's size (the bytes after the prefix, pass-through chunks included)."""
    if size > 0x7FFFFFFF:
        raise ValueError(f"a response of {size} bytes exceeds the int32 size prefix")
    cdef Py_ssize_t end = o.len
    o.len = 0
    _put_be(o, <uint64_t><uint32_t>size, 4)
    o.len = end
    return 0


cdef inline object _get(object mapping, str key, object default):
    """``mapping.get(key, default)``, through the dict's C lookup for a dict (the
    handlers' bodies and decoded Structs), a method call for any other mapping."""
    cdef PyObject* found
    if PyDict_Check(mapping):
        found = PyDict_GetItemWithError(mapping, key)
        if found == NULL:
            return default
        return <object>found
    return mapping.get(key, default)


cdef int _encode_partition(_Out* o, object part, int version, bint compact) except -1:
    _put_int(o, _get(part, "index", 0), 4)
    _put_int(o, _get(part, "error_code", 0), 2)
    _put_int(o, _get(part, "base_offset", 0), 8)
    if version >= 2:
        _put_int(o, _get(part, "log_append_time_ms", -1), 8)
    if version >= 5:
        _put_int(o, _get(part, "log_start_offset", -1), 8)
    if version >= 8:
        record_errors = _get(part, "record_errors", ())
        if record_errors is None:
            raise ValueError("None for a non-nullable array")
        _put_count(o, len(record_errors), compact)
        for entry in record_errors:
            _put_int(o, _get(entry, "batch_index", 0), 4)
            _put_string(o, _get(entry, "batch_index_error_message", None), compact, True)
            if compact:
                _put_be(o, 0, 1)
        _put_string(o, _get(part, "error_message", None), compact, True)
    leader = _get(part, "current_leader", None) if version >= PRODUCE_LEADER_HINTS_FROM else None
    if leader is not None:
        # One tagged field: tag 0, 9 bytes (two int32s and the struct's empty tags).
        _put_be(o, 1, 1)
        _put_be(o, 0, 1)
        _put_be(o, 9, 1)
        _put_int(o, _get(leader, "leader_id", -1), 4)
        _put_int(o, _get(leader, "leader_epoch", -1), 4)
        _put_be(o, 0, 1)
    elif compact:
        _put_be(o, 0, 1)
    return 0


cdef int _put_node_endpoints(_Out* o, object endpoints) except -1:
    """The response's tagged section with node_endpoints (tag 0) as its one field."""
    cdef _Out inner
    inner.data = NULL
    try:
        inner.cap = 64
        inner.len = 0
        inner.data = <uint8_t*>PyMem_Malloc(<size_t>inner.cap)
        if inner.data == NULL:
            raise MemoryError()
        _put_count(&inner, len(endpoints), True)
        for node in endpoints:
            _put_int(&inner, _get(node, "node_id", 0), 4)
            _put_string(&inner, _get(node, "host", ""), True, False)
            _put_int(&inner, _get(node, "port", 0), 4)
            _put_string(&inner, _get(node, "rack", None), True, True)
            _put_be(&inner, 0, 1)
        _put_be(o, 1, 1)
        _put_be(o, 0, 1)
        _put_uvarint(o, <uint64_t>inner.len)
        _reserve(o, inner.len)
        memcpy(o.data + o.len, inner.data, <size_t>inner.len)
        o.len += inner.len
    finally:
        PyMem_Free(inner.data)
    return 0


def encode_produce_response(int version, int32_t correlation_id, body):
    """The whole ProduceResponse frame (int32 size prefix, response header, body) as one
    ``bytes``, byte for byte what ``pykfk.protocol.framing.encode_response`` gives joined.

    ``body`` is a mapping like the generic encoder's (``responses``, ``throttle_time_ms``;
    missing keys take the declared defaults). Raises ValueError for a version outside
    0-13 or a value that does not fit its field (OverflowError for out-of-range ints)."""
    if version < PRODUCE_MIN_VERSION or version > PRODUCE_MAX_VERSION:
        raise ValueError(f"Produce v{version} is outside {PRODUCE_MIN_VERSION}-{PRODUCE_MAX_VERSION}")
    cdef bint compact = version >= PRODUCE_FLEXIBLE_FROM
    cdef _Out o
    o.data = NULL
    try:
        # 256 bytes: one topic with one partition (the common answer) fits with room to spare.
        _open_frame(&o, 256, correlation_id, compact)
        responses = _get(body, "responses", ())
        if responses is None:
            raise ValueError("None for a non-nullable array")
        _put_count(&o, len(responses), compact)
        for topic in responses:
            if version >= PRODUCE_TOPIC_IDS_FROM:
                _put_uuid(&o, _get(topic, "topic_id", ZERO_UUID))
            else:
                _put_string(&o, _get(topic, "name", ""), compact, False)
            parts = _get(topic, "partition_responses", ())
            if parts is None:
                raise ValueError("None for a non-nullable array")
            _put_count(&o, len(parts), compact)
            for part in parts:
                _encode_partition(&o, part, version, compact)
            if compact:
                _put_be(&o, 0, 1)
        if version >= 1:
            _put_int(&o, _get(body, "throttle_time_ms", 0), 4)
        endpoints = _get(body, "node_endpoints", ()) if version >= PRODUCE_LEADER_HINTS_FROM else ()
        if endpoints:
            _put_node_endpoints(&o, endpoints)
        elif compact:
            _put_be(&o, 0, 1)
        _close_frame(&o, o.len - 4)
        return PyBytes_FromStringAndSize(<char*>o.data, o.len)
    finally:
        PyMem_Free(o.data)


# ---------------------------------------------------------------------------------------
# Fetch response encoder (apache/kafka FetchResponse.json, v0-v18)
#
#   frame: int32 size, int32 correlation_id, [tagged fields: one 0 byte]  v12+ (header v1)
#   FetchResponse body
#     throttle_time_ms            int32                 v1+
#     error_code                  int16                 v7+
#     session_id                  int32                 v7+
#     responses                   array of
#       topic                     string                v0-12
#       topic_id                  uuid (16 bytes)       v13+
#       partitions                array of
#         partition_index         int32
#         error_code              int16
#         high_watermark          int64
#         last_stable_offset      int64                 v4+
#         log_start_offset        int64                 v5+
#         aborted_transactions    nullable array of     v4+
#           producer_id           int64
#           first_offset          int64
#           [tagged fields]                             v12+
#         preferred_read_replica  int32                 v11+
#         records                 nullable records
#         [tagged fields]         diverging_epoch 0, current_leader 1, snapshot_id 2   v12+
#       [tagged fields]                                 v12+
#     [tagged fields]             node_endpoints 0      v16+
#
# Record data are not copied when they are a FileRegion or at least INLINE_RECORDS_MAX
# bytes: the frame comes back as chunks around them, as the generic encoder gives it.
# A body this encoder does not cover (a tagged field set, records given as a list of
# chunks) returns None: the caller encodes it with the generic codec.

FETCH_MIN_VERSION = 0
FETCH_MAX_VERSION = 18
FETCH_FLEXIBLE_FROM = 12

cdef tuple _FETCH_PARTITION_TAGS = ("diverging_epoch", "current_leader", "snapshot_id")


cdef int _put_uuid(_Out* o, object value) except -1:
    # UUID.bytes is a Python property (a frame per topic of every v13+ answer); the
    # integer's own to_bytes is a C method.
    cdef bytes raw = value.int.to_bytes(16, "big") if type(value) is UUID else value.bytes
    _reserve(o, 16)
    memcpy(o.data + o.len, <const char*>raw, 16)
    o.len += 16
    return 0


cdef int _put_records(_Out* o, object value, bint compact, list cuts) except -1:
    """The length prefix, then the bytes inline or, for a FileRegion or a large buffer,
    a cut: (position in the output, the chunk) to send in place."""
    cdef Py_ssize_t n
    cdef Py_buffer pybuf
    if value is None:
        if compact:
            return _put_be(o, 0, 1)
        return _put_be(o, 0xFFFFFFFF, 4)
    if type(value) is FileRegion:
        n = value.size
    else:
        PyObject_GetBuffer(value, &pybuf, PyBUF_SIMPLE)
        n = pybuf.len
        if n < INLINE_RECORDS_MAX:
            try:
                if compact:
                    _put_uvarint(o, <uint64_t>(n + 1))
                else:
                    _put_be(o, <uint64_t><uint32_t>n, 4)
                _reserve(o, n)
                memcpy(o.data + o.len, pybuf.buf, <size_t>n)
                o.len += n
            finally:
                PyBuffer_Release(&pybuf)
            return 0
        PyBuffer_Release(&pybuf)
    if compact:
        _put_uvarint(o, <uint64_t>(n + 1))
    else:
        _put_be(o, <uint64_t><uint32_t>n, 4)
    if n:
        cuts.append((o.len, value))
    return 0


cdef int _encode_fetch_partition(_Out* o, object part, int version, bint compact, list cuts) except -1:
    """Writes one partition entry; returns 1, having written nothing, for an entry this
    encoder does not cover (a tagged field set, records as a list of chunks)."""
    records = _get(part, "records", None)
    if type(records) is list or type(records) is tuple:
        return 1
    if compact:
        for tag in _FETCH_PARTITION_TAGS:
            if _get(part, tag, None) is not None:
                return 1
    _put_int(o, _get(part, "partition_index", 0), 4)
    _put_int(o, _get(part, "error_code", 0), 2)
    _put_int(o, _get(part, "high_watermark", 0), 8)
    if version >= 4:
        _put_int(o, _get(part, "last_stable_offset", -1), 8)
    if version >= 5:
        _put_int(o, _get(part, "log_start_offset", -1), 8)
    if version >= 4:
        aborted = _get(part, "aborted_transactions", None)
        if aborted is None:
            if compact:
                _put_be(o, 0, 1)
            else:
                _put_be(o, 0xFFFFFFFF, 4)
        else:
            _put_count(o, len(aborted), compact)
            for txn in aborted:
                _put_int(o, _get(txn, "producer_id", 0), 8)
                _put_int(o, _get(txn, "first_offset", 0), 8)
                if compact:
                    _put_be(o, 0, 1)
    if version >= 11:
        _put_int(o, _get(part, "preferred_read_replica", -1), 4)
    _put_records(o, records, compact, cuts)
    if compact:
        _put_be(o, 0, 1)
    return 0


def encode_fetch_response(int version, int32_t correlation_id, body):
    """The whole FetchResponse frame (int32 size prefix, response header, body) as a list
    of chunks: bytes, with each FileRegion (and each records buffer of at least
    INLINE_RECORDS_MAX bytes) as its own chunk in place, the same bytes the generic
    encoder (``pykfk.protocol.framing.encode_response``) gives. None when the body sets
    a field this encoder does not write (the tagged diverging_epoch, current_leader,
    snapshot_id or node_endpoints; records given as a list): encode it generically.
    Raises ValueError for a version outside 0-18 or a value that does not fit its field
    (OverflowError for out-of-range ints)."""
    if version < FETCH_MIN_VERSION or version > FETCH_MAX_VERSION:
        raise ValueError(f"Fetch v{version} is outside {FETCH_MIN_VERSION}-{FETCH_MAX_VERSION}")
    if version >= FETCH_FLEXIBLE_FROM and _get(body, "node_endpoints", None):
        return None  # a tagged field this encoder does not write
    cdef bint compact = version >= FETCH_FLEXIBLE_FROM
    cdef list cuts = []
    cdef _Out o
    cdef Py_ssize_t total, start, cut_at
    o.data = NULL
    try:
        _open_frame(&o, 1024, correlation_id, compact)
        if version >= 1:
            _put_int(&o, _get(body, "throttle_time_ms", 0), 4)
        if version >= 7:
            _put_int(&o, _get(body, "error_code", 0), 2)
            _put_int(&o, _get(body, "session_id", 0), 4)
        responses = _get(body, "responses", ())
        if responses is None:
            raise ValueError("None for a non-nullable array")
        _put_count(&o, len(responses), compact)
        for topic in responses:
            if version >= 13:
                _put_uuid(&o, _get(topic, "topic_id", None))
            else:
                _put_string(&o, _get(topic, "topic", ""), compact, False)
            parts = _get(topic, "partitions", ())
            if parts is None:
                raise ValueError("None for a non-nullable array")
            _put_count(&o, len(parts), compact)
            for part in parts:
                if _encode_fetch_partition(&o, part, version, compact, cuts):
                    return None
            if compact:
                _put_be(&o, 0, 1)
        if compact:
            _put_be(&o, 0, 1)
        total = o.len - 4
        for cut in cuts:
            chunk = cut[1]
            total += chunk.size if type(chunk) is FileRegion else len(memoryview(chunk).cast("B"))
        _close_frame(&o, total)
        if not cuts:
            return [PyBytes_FromStringAndSize(<char*>o.data, o.len)]
        chunks = []
        start = 0
        for cut in cuts:
            cut_at = cut[0]
            if cut_at > start:
                chunks.append(PyBytes_FromStringAndSize(<char*>o.data + start, cut_at - start))
            chunks.append(cut[1])
            start = cut_at
        if o.len > start:
            chunks.append(PyBytes_FromStringAndSize(<char*>o.data + start, o.len - start))
        return chunks
    finally:
        PyMem_Free(o.data)


# ---------------------------------------------------------------------------------------
# Fetch request walk (apache/kafka FetchRequest.json, v0-v18)
#
#   FetchRequest body (after the request header)
#     replica_id               int32                       v0-14 (default -1)
#     max_wait_ms              int32
#     min_bytes                int32
#     max_bytes                int32                       v3+ (default 2**31-1)
#     isolation_level          int8                        v4+ (default 0)
#     session_id               int32                       v7+ (default 0)
#     session_epoch            int32                       v7+ (default -1)
#     topics                   array of
#       topic                  string                      v0-12 (default "")
#       topic_id               uuid                        v13+ (default zero)
#       partitions             array of
#         partition            int32
#         current_leader_epoch int32                       v9+ (default -1)
#         fetch_offset         int64
#         last_fetched_epoch   int32                       v12+ (default -1)
#         log_start_offset     int64                       v5+ (default -1)
#         partition_max_bytes  int32
#         [tagged fields]          replica_directory_id 0 (uuid, v17+), high_watermark 1
#                                  (int64, v18+, default 2**63-1)          v12+
#       [tagged fields]                                    v12+
#     forgotten_topics_data    array of                    v7+ (default: an empty tuple)
#       topic                  string                      v7-12
#       topic_id               uuid                        v13+
#       partitions             array of int32
#       [tagged fields]                                    v12+
#     rack_id                  string                      v11+ (default "")
#     [tagged fields]          cluster_id 0 (nullable string), replica_state 1 (v15+:
#                              replica_id int32, replica_epoch int64, tagged fields)
#
# The result is the generic decoder's: a Struct holding every declared field, absent
# ones at their defaults, nested Structs for topics and partitions.

FETCH_REQUEST_MAX_VERSION = 18


cdef inline int8_t _int8(_Cursor* c) except? -1:
    _need(c, 1)
    cdef int8_t v = <int8_t>c.data[c.pos]
    c.pos += 1
    return v


cdef inline int64_t _int64(_Cursor* c) except? -1:
    _need(c, 8)
    cdef const uint8_t* p = c.data + c.pos
    c.pos += 8
    return <int64_t>((<uint64_t>p[0] << 56) | (<uint64_t>p[1] << 48) | (<uint64_t>p[2] << 40)
                     | (<uint64_t>p[3] << 32) | (<uint64_t>p[4] << 24) | (<uint64_t>p[5] << 16)
                     | (<uint64_t>p[6] << 8) | p[7])


# The topic ids requests carry, by their 16 bytes: a consumer names the same few topics in
# every Fetch, and making a UUID costs more than walking the rest of a topic's request.
# UUIDs are immutable, so one object serves every request; bounded, cleared when full.
cdef dict _UUIDS = {}
cdef Py_ssize_t _UUIDS_MAX = 4096


cdef object _uuid(_Cursor* c):
    _need(c, 16)
    raw = PyBytes_FromStringAndSize(<const char*>(c.data + c.pos), 16)
    c.pos += 16
    value = _UUIDS.get(raw)
    if value is None:
        if len(_UUIDS) >= _UUIDS_MAX:
            _UUIDS.clear()
        value = _UUIDS[raw] = UUID(bytes=raw)
    return value


cdef object _fetch_partitions(_Cursor* c, int version, bint compact):
    # Least bytes of a partition: partition 4 + fetch_offset 8 + partition_max_bytes 4.
    cdef Py_ssize_t n = _count(c, compact, 16)
    cdef Py_ssize_t i
    partitions = []
    for i in range(n):
        part = Struct()
        PyDict_SetItem(part, "partition", _int32(c))
        PyDict_SetItem(part, "current_leader_epoch", _int32(c) if version >= 9 else -1)
        PyDict_SetItem(part, "fetch_offset", _int64(c))
        PyDict_SetItem(part, "last_fetched_epoch", _int32(c) if version >= 12 else -1)
        PyDict_SetItem(part, "log_start_offset", _int64(c) if version >= 5 else -1)
        PyDict_SetItem(part, "partition_max_bytes", _int32(c))
        PyDict_SetItem(part, "replica_directory_id", ZERO_UUID)
        PyDict_SetItem(part, "high_watermark", INT64_MAX)
        if version >= 17:
            _fetch_tagged(c, part, version, True)
        elif compact:
            _skip_tagged(c)
        partitions.append(part)
    return partitions


cdef object _fetch_topics(_Cursor* c, int version, bint compact, bint forgotten):
    """The topics array (``forgotten``: forgotten_topics_data, whose partitions are bare
    int32s), each topic named by its name (v0-12) or its id (v13+)."""
    # Least bytes of a topic: a name or id (1 compact, 2 classic, 16 as a uuid) and a count.
    cdef Py_ssize_t n = _count(c, compact, 17 if version >= 13 else (2 if compact else 6))
    cdef Py_ssize_t i, j, m
    topics = []
    for i in range(n):
        topic = Struct()
        if version >= 13:
            PyDict_SetItem(topic, "topic", "")
            PyDict_SetItem(topic, "topic_id", _uuid(c))
        else:
            PyDict_SetItem(topic, "topic", _string(c, compact, False))
            PyDict_SetItem(topic, "topic_id", ZERO_UUID)
        if forgotten:
            m = _count(c, compact, 4)
            PyDict_SetItem(topic, "partitions", [_int32(c) for j in range(m)])
        else:
            PyDict_SetItem(topic, "partitions", _fetch_partitions(c, version, compact))
        if compact:
            _skip_tagged(c)
        topics.append(topic)
    return topics


cdef object _replica_state(_Cursor* c):
    state = Struct()
    PyDict_SetItem(state, "replica_id", _int32(c))
    PyDict_SetItem(state, "replica_epoch", _int64(c))
    _skip_tagged(c)
    return state


cdef int _fetch_tagged(_Cursor* c, object target, int version, bint partition) except -1:
    """A tagged section, each known field decoded within its declared size, other tags
    skipped: the request's (cluster_id 0; replica_state 1 from v15) or, with
    ``partition``, a partition's (replica_directory_id 0 from v17; high_watermark 1 from
    v18)."""
    cdef int64_t count = _uvarint(c)
    cdef int64_t i, tag, size
    cdef Py_ssize_t end, saved_end
    cdef bint known
    if count * 2 > c.end - c.pos:
        raise ProtocolError(f"tagged field count {count} at byte {c.pos} exceeds the bytes left")
    for i in range(count):
        tag = _uvarint(c)
        size = _uvarint(c)
        if size > c.end - c.pos:
            raise ProtocolError(f"tagged field {tag} of {size} bytes runs past the frame")
        end = c.pos + <Py_ssize_t>size
        known = tag == 0 or (tag == 1 and version >= (18 if partition else 15))
        if known:
            saved_end = c.end
            c.end = end
            if partition:
                if tag == 0:
                    PyDict_SetItem(target, "replica_directory_id", _uuid(c))
                else:
                    PyDict_SetItem(target, "high_watermark", _int64(c))
            elif tag == 0:
                PyDict_SetItem(target, "cluster_id", _string(c, True, True))
            else:
                PyDict_SetItem(target, "replica_state", _replica_state(c))
            c.end = saved_end
            if c.pos != end:
                raise ProtocolError(f"tagged field {tag} declares {size} bytes, holds {c.pos - (end - size)}")
        c.pos = end
    return 0


def decode_fetch(frame, Py_ssize_t offset, int version):
    """Decode the FetchRequest body of ``frame`` (a request without its size prefix; the
    body runs from ``offset`` to the end) at ``version`` (0-18): the Struct the generic
    decoder (``pykfk.protocol.messages.fetch.SPEC.decode_request``) gives. Raises
    ProtocolError where that decoder does (truncation, bad lengths or counts, invalid
    UTF-8, trailing bytes) and ValueError for a version outside 0-18."""
    if version < FETCH_MIN_VERSION or version > FETCH_REQUEST_MAX_VERSION:
        raise ValueError(f"Fetch v{version} is outside {FETCH_MIN_VERSION}-{FETCH_REQUEST_MAX_VERSION}")
    cdef Py_buffer pybuf
    cdef _Cursor c
    cdef bint compact = version >= FETCH_FLEXIBLE_FROM
    PyObject_GetBuffer(frame, &pybuf, PyBUF_SIMPLE)
    try:
        if offset < 0 or offset > pybuf.len:
            raise ValueError(f"body offset {offset} outside a frame of {pybuf.len} bytes")
        c.data = <const uint8_t*>pybuf.buf
        c.pos = offset
        c.end = pybuf.len
        request = Struct()
        PyDict_SetItem(request, "cluster_id", None)
        try:
            PyDict_SetItem(request, "replica_id", _int32(&c) if version <= 14 else -1)
            PyDict_SetItem(request, "replica_state", None)
            PyDict_SetItem(request, "max_wait_ms", _int32(&c))
            PyDict_SetItem(request, "min_bytes", _int32(&c))
            PyDict_SetItem(request, "max_bytes", _int32(&c) if version >= 3 else 2147483647)
            PyDict_SetItem(request, "isolation_level", _int8(&c) if version >= 4 else 0)
            PyDict_SetItem(request, "session_id", _int32(&c) if version >= 7 else 0)
            PyDict_SetItem(request, "session_epoch", _int32(&c) if version >= 7 else -1)
            PyDict_SetItem(request, "topics", _fetch_topics(&c, version, compact, False))
            PyDict_SetItem(request, "forgotten_topics_data", _fetch_topics(&c, version, compact, True) if version >= 7 else ())
            PyDict_SetItem(request, "rack_id", _string(&c, compact, False) if version >= 11 else "")
            if compact:
                _fetch_tagged(&c, request, version, False)
        except ProtocolError as exc:
            raise ProtocolError(f"Fetch v{version} request: {exc}") from None
        if c.pos != c.end:
            raise ProtocolError(f"Fetch v{version} request has {c.end - c.pos} trailing bytes")
        return request
    finally:
        PyBuffer_Release(&pybuf)
