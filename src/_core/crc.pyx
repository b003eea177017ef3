# cython: language_level=3
"""CRC-32 (IEEE) and CRC-32C (Castagnoli) over any contiguous buffer.

Thin bindings over crc32.c. The GIL is released for inputs above GIL_RELEASE_BYTES.
"""
from libc.stdint cimport uint32_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from _crc32 cimport (pk_crc32, pk_crc32c, pk_crc32_portable, pk_crc32c_portable,
                     pk_crc_hw_features)

# aiokafka releases the GIL for CRCs over 5 KiB; bench/bench_crc32.py checks the figure.
GIL_RELEASE_BYTES = 5 * 1024
cdef Py_ssize_t _gil_release_bytes = GIL_RELEASE_BYTES

ctypedef uint32_t (*crc_fn)(uint32_t, const void *, size_t) noexcept nogil


cdef uint32_t _crc_over(crc_fn fn, object buf, Py_ssize_t start, object end, uint32_t value) except? 0xFFFFFFFF:
    cdef Py_buffer view
    cdef Py_ssize_t stop
    cdef const unsigned char *p
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        stop = view.len if end is None else <Py_ssize_t>end
        if start < 0 or stop < start or stop > view.len:
            raise ValueError(f"range [{start}, {stop}) outside a buffer of {view.len} bytes")
        p = <const unsigned char *>view.buf + start
        if stop - start >= _gil_release_bytes:
            with nogil:
                value = fn(value, p, <size_t>(stop - start))
        else:
            value = fn(value, p, <size_t>(stop - start))
        return value
    finally:
        PyBuffer_Release(&view)


def crc32(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32 (zlib.crc32) of buf[start:end], continuing from ``value``."""
    return _crc_over(<crc_fn>pk_crc32, buf, start, end, value)


def crc32c(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32C of buf[start:end], continuing from ``value``."""
    return _crc_over(<crc_fn>pk_crc32c, buf, start, end, value)


def crc32_portable(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32 through the table path only (visible for testing)."""
    return _crc_over(<crc_fn>pk_crc32_portable, buf, start, end, value)


def crc32c_portable(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32C through the table path only (visible for testing)."""
    return _crc_over(<crc_fn>pk_crc32c_portable, buf, start, end, value)


def hardware_features():
    """Names of the CPU accelerations the CRC functions use on this machine."""
    cdef int bits = pk_crc_hw_features()
    return frozenset(name for bit, name in ((1, "sse4.2"), (2, "pclmulqdq")) if bits & bit)
