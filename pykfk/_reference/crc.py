"""Pure-Python CRC-32 (IEEE 802.3) and CRC-32C (Castagnoli): the test oracle for _core.crc.

Bit-at-a-time on purpose: slow, but short enough to check by eye against the definition
(reflected CRC, initial value and final XOR 0xFFFFFFFF). Same names and arguments as
``pykfk._core.crc`` so tests can parametrize over both modules. Also holds the polynomial
arithmetic used to derive the folding constants hard-coded in ``src/_core/crc32.c``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing_extensions import Buffer

# Reflected generator polynomials (bit i is the coefficient of x^(31-i); x^32 implied).
CRC32_POLY = 0xEDB88320  # IEEE 802.3, zlib, legacy Kafka messages (magic 0/1)
CRC32C_POLY = 0x82F63B78  # Castagnoli, Kafka record batches (magic 2)


def _crc_bits(poly: int, buf: Buffer, start: int, end: int | None, value: int) -> int:
    data = memoryview(buf).cast("B")
    stop = len(data) if end is None else end
    if start < 0 or stop < start or stop > len(data):
        raise ValueError(f"range [{start}, {stop}) outside a buffer of {len(data)} bytes")
    if not 0 <= value <= 0xFFFFFFFF:
        raise OverflowError(f"CRC value {value} does not fit in 32 bits")
    crc = value ^ 0xFFFFFFFF
    for byte in data[start:stop]:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def crc32(buf: Buffer, start: int = 0, end: int | None = None, value: int = 0) -> int:
    """CRC-32 (zlib.crc32) of buf[start:end], continuing from ``value``."""
    return _crc_bits(CRC32_POLY, buf, start, end, value)


def crc32c(buf: Buffer, start: int = 0, end: int | None = None, value: int = 0) -> int:
    """CRC-32C of buf[start:end], continuing from ``value``."""
    return _crc_bits(CRC32C_POLY, buf, start, end, value)


# The reference has a single path; these names keep it interchangeable with _core.crc.
crc32_portable = crc32
crc32c_portable = crc32c


def hardware_features() -> frozenset[str]:
    """No acceleration in pure Python."""
    return frozenset()


# --- GF(2) polynomial arithmetic, for deriving and checking the constants in crc32.c ---
# Polynomials here are plain ints in *normal* order (bit k = coefficient of x^k).


def _reflect(value: int, width: int) -> int:
    return int(format(value, f"0{width}b")[::-1], 2)


def normal_poly(reflected_poly: int) -> int:
    """The full degree-32 generator P(x) from its 32-bit reflected form."""
    return (1 << 32) | _reflect(reflected_poly, 32)


def clmul(a: int, b: int) -> int:
    """Carry-less product of two polynomials."""
    product = 0
    while b:
        if b & 1:
            product ^= a
        a <<= 1
        b >>= 1
    return product


def poly_divmod(a: int, p: int) -> tuple[int, int]:
    """Quotient and remainder of polynomial a by p."""
    quotient, degree = 0, p.bit_length() - 1
    while a.bit_length() - 1 >= degree:
        shift = a.bit_length() - 1 - degree
        quotient |= 1 << shift
        a ^= p << shift
    return quotient, a


def xpow_mod(k: int, p: int) -> int:
    """x^k mod p by square-and-multiply."""
    result, base = 1, 2
    while k:
        if k & 1:
            result = poly_divmod(clmul(result, base), p)[1]
        base = poly_divmod(clmul(base, base), p)[1]
        k >>= 1
    return result


def reflected32(poly: int) -> int:
    """A polynomial of degree < 32 in the reflected 32-bit form (x^k at bit 31-k)."""
    return _reflect(poly, 32)


def reflected64(poly: int) -> int:
    """A polynomial of degree < 64 in the reflected 64-bit form (x^k at bit 63-k)."""
    return _reflect(poly, 64)
