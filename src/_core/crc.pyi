"""CRC-32 (IEEE 802.3, as zlib.crc32) and CRC-32C (Castagnoli, Kafka magic-2 batches).

Every function reads ``buf[start:end]`` of any C-contiguous buffer (bytes, bytearray,
memoryview, mmap, array) in place, without copying, and returns the CRC as an unsigned
32-bit int. ``value`` continues a previous CRC, so a buffer may be checked in pieces:
``crc32c(b, value=crc32c(a)) == crc32c(a + b)``.

Errors: ``BufferError`` for a non-contiguous buffer, ``ValueError`` when ``start``/``end``
fall outside the buffer or ``end < start``, ``OverflowError`` when ``value`` is not a
32-bit unsigned int, ``TypeError`` for objects without the buffer protocol.

Threads: safe from any thread. The GIL is held for inputs below ``GIL_RELEASE_BYTES``
(at most ~100 us of work) and released above; the buffer export held for the call keeps
bytearray and mmap from being resized or closed meanwhile.
"""

from collections.abc import Iterable

from typing_extensions import Buffer

GIL_RELEASE_BYTES: int
"""Inputs this large or larger release the GIL: 4 MiB when both CRCs are accelerated,
else GIL_RELEASE_BYTES_TABLES (see crc.pyx for the measurements behind them)."""
GIL_RELEASE_BYTES_TABLES: int
"""The threshold for the table path (the *_portable functions, and CPUs without SSE4.2
and PCLMULQDQ): 256 KiB."""
_FEATURE_BITS: dict[str, int]
_ACCELERATED: int

def crc32(buf: Buffer, start: int = 0, end: int | None = None, value: int = 0) -> int:
    """CRC-32 (zlib.crc32) of buf[start:end], continuing from ``value``."""

def crc32c(buf: Buffer, start: int = 0, end: int | None = None, value: int = 0) -> int:
    """CRC-32C of buf[start:end], continuing from ``value``."""

def crc32_portable(buf: Buffer, start: int = 0, end: int | None = None, value: int = 0) -> int:
    """CRC-32 through the slicing-by-8 tables only (visible for testing)."""

def crc32c_portable(buf: Buffer, start: int = 0, end: int | None = None, value: int = 0) -> int:
    """CRC-32C through the slicing-by-8 tables only (visible for testing)."""

def hardware_features() -> frozenset[str]:
    """CPU accelerations in use: a subset of {"sse4.2", "pclmulqdq", "vpclmulqdq"}.

    "sse4.2": crc32 instruction for CRC-32C; "pclmulqdq": CRC-32 folding and joining the
    CRC-32C streams; "vpclmulqdq": CRC-32 folding on AVX-512 registers.
    """

def _crc32_using(
    features: Iterable[str], buf: Buffer, start: int = 0, end: int | None = None, value: int = 0
) -> int:
    """CRC-32 restricted to the named accelerations (visible for testing)."""

def _crc32c_using(
    features: Iterable[str], buf: Buffer, start: int = 0, end: int | None = None, value: int = 0
) -> int:
    """CRC-32C restricted to the named accelerations (visible for testing)."""

def _set_gil_release_bytes(nbytes: int | None) -> None:
    """Release the GIL from ``nbytes`` on every path; None restores the defaults
    (visible for benchmarking)."""
