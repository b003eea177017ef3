# cython: language_level=3
"""CRC-32 (IEEE 802.3, zlib) and CRC-32C (Castagnoli, Kafka magic 2) over any contiguous buffer.

Bindings over crc32.c; crc.pyi documents the API. The GIL is released for inputs of
GIL_RELEASE_BYTES or more so that other threads run while a large batch is checked.
"""
from libc.stdint cimport uint32_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from _crc32 cimport (pk_crc32, pk_crc32c, pk_crc32_portable, pk_crc32c_portable,
                     pk_crc_hw_features)

cdef extern from "crc32.h" nogil:
    uint32_t pk_crc32_using(int features, uint32_t crc, const void *buf, size_t length)
    uint32_t pk_crc32c_using(int features, uint32_t crc, const void *buf, size_t length)
    int PK_CRC_HW_SSE42
    int PK_CRC_HW_PCLMUL
    int PK_CRC_HW_VPCLMUL512

# When to release the GIL, from bench/bench_crc32.py::test_gil_release_cost (AMD EPYC,
# CRC-32C at ~60 GB/s). Alone, a release adds only 15-40 ns per call. Beside a thread
# running Python, each release may hand that thread the GIL and the caller waits up to a
# switch interval (5 ms) to get it back: back-to-back calls of 4 KiB to 4 MiB ran at
# 9-32 GB/s holding the GIL but 0.03-17 GB/s releasing it (varying run to run). Holding
# it delays the other thread by the CRC time only, so the GIL is released only once that
# time nears ~100 us: from 4 MiB on the accelerated paths (30-60 GB/s), from 256 KiB on
# the tables (~2.5 GB/s).
# (aiokafka releases from 5 KiB, with a slower CRC.)
GIL_RELEASE_BYTES_TABLES = 256 * 1024
_ACCELERATED = PK_CRC_HW_SSE42 | PK_CRC_HW_PCLMUL  # both CRCs off the tables
GIL_RELEASE_BYTES = (4 * 1024 * 1024 if pk_crc_hw_features() & _ACCELERATED == _ACCELERATED
                     else GIL_RELEASE_BYTES_TABLES)
cdef Py_ssize_t _gil_release_bytes = GIL_RELEASE_BYTES
# The *_portable and *_using calls (tests, benchmarks) may run the tables.
cdef Py_ssize_t _gil_release_bytes_tables = GIL_RELEASE_BYTES_TABLES

# Names used by hardware_features() and the *_using test hooks.
_FEATURE_BITS = {
    "sse4.2": PK_CRC_HW_SSE42,
    "pclmulqdq": PK_CRC_HW_PCLMUL,
    "vpclmulqdq": PK_CRC_HW_VPCLMUL512,
}

cdef enum:
    USE_DISPATCH = -1   # whatever the CPU offers (the public functions)
    USE_TABLES = 0      # slicing-by-8 only (the *_portable functions)


cdef inline uint32_t _update(bint castagnoli, int features, uint32_t value,
                             const unsigned char *p, size_t n) noexcept nogil:
    if features == USE_DISPATCH:
        return pk_crc32c(value, p, n) if castagnoli else pk_crc32(value, p, n)
    if features == USE_TABLES:
        return pk_crc32c_portable(value, p, n) if castagnoli else pk_crc32_portable(value, p, n)
    if castagnoli:
        return pk_crc32c_using(features, value, p, n)
    return pk_crc32_using(features, value, p, n)


cdef object _crc_over(bint castagnoli, int features, object buf, Py_ssize_t start,
                      object end, uint32_t value):
    cdef Py_buffer view
    cdef Py_ssize_t stop
    cdef const unsigned char *p
    # PyBUF_SIMPLE: non-contiguous exporters (strided memoryviews) raise BufferError here.
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        stop = view.len if end is None else <Py_ssize_t>end
        if start < 0 or stop < start or stop > view.len:
            raise ValueError(f"range [{start}, {stop}) outside a buffer of {view.len} bytes")
        p = <const unsigned char *>view.buf + start
        if stop - start >= (_gil_release_bytes if features == USE_DISPATCH
                            else _gil_release_bytes_tables):
            with nogil:
                value = _update(castagnoli, features, value, p, <size_t>(stop - start))
        else:
            value = _update(castagnoli, features, value, p, <size_t>(stop - start))
        return value
    finally:
        PyBuffer_Release(&view)


def crc32(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32 (zlib.crc32) of buf[start:end], continuing from ``value``."""
    return _crc_over(False, USE_DISPATCH, buf, start, end, value)


def crc32c(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32C of buf[start:end], continuing from ``value``."""
    return _crc_over(True, USE_DISPATCH, buf, start, end, value)


def crc32_portable(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32 through the table path only (visible for testing)."""
    return _crc_over(False, USE_TABLES, buf, start, end, value)


def crc32c_portable(buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32C through the table path only (visible for testing)."""
    return _crc_over(True, USE_TABLES, buf, start, end, value)


cdef int _feature_bits(object features) except -1:
    cdef int bits = 0
    for name in features:
        try:
            bits |= _FEATURE_BITS[name]
        except KeyError:
            raise ValueError(
                f"unknown CPU feature {name!r}; known: {sorted(_FEATURE_BITS)}") from None
    return bits


def _crc32_using(features, buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32 using only the named accelerations (visible for testing)."""
    return _crc_over(False, _feature_bits(features), buf, start, end, value)


def _crc32c_using(features, buf, Py_ssize_t start=0, end=None, uint32_t value=0):
    """CRC-32C using only the named accelerations (visible for testing)."""
    return _crc_over(True, _feature_bits(features), buf, start, end, value)


def _set_gil_release_bytes(nbytes):
    """Release the GIL from ``nbytes`` on every path, or restore the defaults with None
    (visible for benchmarking)."""
    global _gil_release_bytes, _gil_release_bytes_tables
    if nbytes is None:
        _gil_release_bytes, _gil_release_bytes_tables = GIL_RELEASE_BYTES, GIL_RELEASE_BYTES_TABLES
    elif nbytes < 0:
        raise ValueError("the GIL release threshold cannot be negative")
    else:
        _gil_release_bytes = _gil_release_bytes_tables = nbytes


def hardware_features():
    """Names of the CPU accelerations the CRC functions use on this machine."""
    cdef int bits = pk_crc_hw_features()
    return frozenset(name for name, bit in _FEATURE_BITS.items() if bits & bit)
