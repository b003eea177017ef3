# Declarations only (no runtime import): the growable byte buffer the compiled encoders
# (wire.pyx, metadata.pyx) write responses into. ``data`` holds ``len`` bytes of ``cap``;
# its owner frees it with PyMem_Free.
from cpython.mem cimport PyMem_Realloc
from libc.stdint cimport uint8_t


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
