# Declarations only (no runtime import): the growable byte buffer the compiled encoders
# (wire.pyx, metadata.pyx) write responses into, and the writers of its integers and
# array counts. ``data`` holds ``len`` bytes of ``cap``; its owner frees it with
# PyMem_Free.
from cpython.mem cimport PyMem_Realloc
from libc.stdint cimport uint8_t, uint32_t, uint64_t


cdef struct Out:
    uint8_t* data
    Py_ssize_t len
    Py_ssize_t cap


cdef inline int reserve(Out* o, Py_ssize_t n) except -1:
    """Room for ``n`` more bytes, doubling the capacity as often as needed."""
    cdef Py_ssize_t cap
    cdef uint8_t* grown
    if o.len + n <= o.cap:
        return 0
    cap = o.cap * 2 if o.cap > 0 else 64
    while cap < o.len + n:
        cap *= 2
    grown = <uint8_t*>PyMem_Realloc(o.data, <size_t>cap)
    if grown == NULL:
        raise MemoryError()
    o.data = grown
    o.cap = cap
    return 0


cdef inline int put_be(Out* o, uint64_t value, int width) except -1:
    """The low ``width`` bytes of ``value``, big-endian."""
    reserve(o, width)
    cdef int i
    for i in range(width):
        o.data[o.len + i] = <uint8_t>((value >> (8 * (width - 1 - i))) & 0xFF)
    o.len += width
    return 0


cdef inline int put_uvarint(Out* o, uint64_t value) except -1:
    """An unsigned varint of at most 32 bits (Kafka's compact lengths and counts)."""
    if value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range: {value}")
    reserve(o, 5)
    while value >= 0x80:
        o.data[o.len] = <uint8_t>((value & 0x7F) | 0x80)
        o.len += 1
        value >>= 7
    o.data[o.len] = <uint8_t>value
    o.len += 1
    return 0


cdef inline int put_count(Out* o, Py_ssize_t n, bint compact) except -1:
    """An array's count prefix: compact (n + 1 as an unsigned varint) or int32."""
    if compact:
        return put_uvarint(o, <uint64_t>(n + 1))
    if n > 0x7FFFFFFF:
        raise ValueError("array longer than 2**31-1 elements")
    return put_be(o, <uint64_t><uint32_t>n, 4)
