"""Kafka protocol primitive types: fixed-width integers, (compact) strings, bytes, arrays,
records, UUIDs, unsigned varints and tagged-field sections (KIP-482).

Every reader has the signature ``read(buf: memoryview, pos: int) -> (value, new_pos)``
and every writer ``write(out: bytearray, value, extra: list) -> None``; ``extra`` collects
``(position in out, chunk)`` pairs for record data that is not copied into ``out``
(FileRegion, large buffers). Readers and writers are chosen once per field and version
by ``codec.py``; nothing here branches on the version at run time.

Classic vs compact encodings (apache/kafka ``common/message/README.md``):

    type      classic (non-flexible versions)     compact (flexible versions)
    string    int16 length, -1 = null             uvarint (length + 1), 0 = null
    bytes     int32 length, -1 = null             uvarint (length + 1), 0 = null
    records   int32 length, -1 = null             uvarint (length + 1), 0 = null
    array     int32 count, -1 = null              uvarint (count + 1), 0 = null

Hostile input never allocates more than the frame holds: every length and count is
checked against the bytes left before anything is sliced or looped over.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pykfk._core.errors import ProtocolError
from pykfk._core.regions import FileRegion
from pykfk._core.structs import Struct

# Owned by the compiled core, which imports nothing of pykfk.protocol: the Produce/Fetch
# fast path raises the same ProtocolError and uses the same record-inlining threshold and
# null topic id. Re-exported: the codec sizes regions, the server sends them; decoders
# build Structs.
from pykfk._core.wire import INLINE_RECORDS_MAX, ZERO_UUID

__all__ = ["INLINE_RECORDS_MAX", "ZERO_UUID", "FileRegion", "ProtocolError", "Struct"]

Reader = Callable[[memoryview, int], "tuple[Any, int]"]
Writer = Callable[[bytearray, Any, list[Any]], None]
# A declared struct compiled for one version (codec.py): decode(buf, pos) -> (value,
# end); encode(out, body, extra).
Decoder = Callable[[memoryview, int], "tuple[Struct, int]"]
Encoder = Callable[[bytearray, Any, list[Any]], None]


Request = TypeVar("Request")


def replaced(request: Request, **fields: object) -> Request:
    """A copy of the decoded ``request`` (a Struct, typed by ``pykfk.protocol.typed``) with
    ``fields`` replaced: a handler passing on the part of a request it may serve."""
    copy = Struct(cast("Mapping[str, object]", request))
    copy.update(fields)
    return cast(Request, copy)


class UnsupportedVersionError(ProtocolError):
    """An api key or version this protocol layer has no declaration for."""



_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT16 = struct.Struct(">H")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")
_UUID = struct.Struct(">16s")
_unpack_int16 = _INT16.unpack_from
_unpack_int32 = _INT32.unpack_from
_pack_int16 = _INT16.pack
_pack_int32 = _INT32.pack


# ---------------------------------------------------------------- unsigned varints


def read_uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 5 bytes (a 32-bit value), as Kafka's
    ByteUtils.readUnsignedVarint."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value > 0xFFFFFFFF:
                raise ProtocolError("unsigned varint does not fit in 32 bits")
            return value, pos
        shift += 7
        if shift > 28:
            raise ProtocolError("unsigned varint longer than 5 bytes")


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0x80:
        out.append(value)
        return
    if value > 0xFFFFFFFF or value < 0:
        raise ValueError(f"unsigned varint out of range: {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


# ---------------------------------------------------------------- fixed-width types


@dataclass(frozen=True)
class Primitive:
    """A scalar spec type. ``fmt`` is its struct format (fixed-width types only, so
    codec.py can merge runs of them into one struct.Struct); ``min_size`` is the least
    number of bytes one value occupies on the wire, used to bound array counts."""

    name: str
    fmt: str | None
    default: Any
    min_size: int
    compact_min_size: int


INT8 = Primitive("int8", "b", 0, 1, 1)
INT16 = Primitive("int16", "h", 0, 2, 2)
INT32 = Primitive("int32", "i", 0, 4, 4)
INT64 = Primitive("int64", "q", 0, 8, 8)
UINT16 = Primitive("uint16", "H", 0, 2, 2)
UINT32 = Primitive("uint32", "I", 0, 4, 4)
FLOAT64 = Primitive("float64", "d", 0.0, 8, 8)
BOOL = Primitive("bool", "?", False, 1, 1)
UUID = Primitive("uuid", None, ZERO_UUID, 16, 16)
STRING = Primitive("string", None, "", 2, 1)
BYTES = Primitive("bytes", None, b"", 4, 1)
RECORDS = Primitive("records", None, None, 4, 1)

PRIMITIVES = {
    p.name: p
    for p in (
        INT8,
        INT16,
        INT32,
        INT64,
        UINT16,
        UINT32,
        FLOAT64,
        BOOL,
        UUID,
        STRING,
        BYTES,
        RECORDS,
    )
}


def read_uuid(buf: memoryview, pos: int) -> tuple[uuid.UUID, int]:
    return uuid.UUID(bytes=_UUID.unpack_from(buf, pos)[0]), pos + 16


def write_uuid(out: bytearray, value: uuid.UUID, extra: list[Any]) -> None:
    out += value.bytes


def fixed_reader(prim: Primitive) -> Reader:
    """Reader for one fixed-width value (used for tagged fields and arrays of scalars;
    struct fields are read in merged runs by codec.py)."""
    if prim is UUID:
        return read_uuid
    unpack = struct.Struct(">" + prim.fmt).unpack_from  # type: ignore[operator]
    size = prim.min_size

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        return unpack(buf, pos)[0], pos + size

    return read


def fixed_writer(prim: Primitive) -> Writer:
    if prim is UUID:
        return write_uuid
    pack = struct.Struct(">" + prim.fmt).pack  # type: ignore[operator]

    def write(out: bytearray, value: Any, extra: list[Any]) -> None:
        out += pack(value)

    return write


# ---------------------------------------------------------------- length-prefixed types


def _check_length(buf: memoryview, pos: int, length: int) -> int:
    end = pos + length
    if end > len(buf):
        raise ProtocolError(f"length {length} at byte {pos} runs past the end of the frame")
    return end


def _text(buf: memoryview, pos: int, end: int) -> str:
    try:
        return str(buf[pos:end], "utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"string at byte {pos} is not valid UTF-8") from exc


def _null_error(what: str, pos: int) -> ProtocolError:
    return ProtocolError(f"null {what} at byte {pos} in a non-nullable field")


def _read_size(
    buf: memoryview, pos: int, compact: bool, nullable: bool, what: str
) -> tuple[int | None, int]:
    """The length or count in front of bytes and arrays: an int32, or in flexible versions
    an unsigned varint holding length + 1. -1 is null (None), allowed only if nullable."""
    start = pos
    if compact:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        (n,) = _unpack_int32(buf, pos)
        pos += 4
    if n >= 0:
        return n, pos
    if n == -1 and nullable:
        return None, pos
    noun = what.split()[0]
    raise (
        _null_error(noun, pos) if n == -1 else ProtocolError(f"negative {what} {n} at byte {start}")
    )


def string_reader(compact: bool, nullable: bool) -> Reader:
    if compact:

        def read(buf: memoryview, pos: int) -> tuple[str | None, int]:
            n, pos = read_uvarint(buf, pos)
            if n == 0:
                if nullable:
                    return None, pos
                raise _null_error("string", pos)
            end = _check_length(buf, pos, n - 1)
            return _text(buf, pos, end), end

    else:

        def read(buf: memoryview, pos: int) -> tuple[str | None, int]:
            (n,) = _unpack_int16(buf, pos)
            pos += 2
            if n < 0:
                if n == -1 and nullable:
                    return None, pos
                raise (
                    _null_error("string", pos)
                    if n == -1
                    else ProtocolError(f"negative string length {n} at byte {pos - 2}")
                )
            end = _check_length(buf, pos, n)
            return _text(buf, pos, end), end

    return read


def string_writer(compact: bool, nullable: bool) -> Writer:
    def write(out: bytearray, value: str | None, extra: list[Any]) -> None:
        if value is None:
            if not nullable:
                raise ValueError("None for a non-nullable string")
            if compact:
                out.append(0)
            else:
                out += b"\xff\xff"
            return
        data = value.encode("utf-8")
        if compact:
            write_uvarint(out, len(data) + 1)
        else:
            if len(data) > 0x7FFF:
                raise ValueError("string longer than 32767 bytes")
            out += _pack_int16(len(data))
        out += data

    return write


def bytes_reader(compact: bool, nullable: bool, view: bool) -> Reader:
    """Reader for ``bytes`` (a copy, so stored values never pin the frame) or, with
    ``view``, for ``records`` (a memoryview slice of the frame, no copy)."""

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = _read_size(buf, pos, compact, nullable, "bytes length")
        if n is None:
            return None, pos
        end = _check_length(buf, pos, n)
        return (buf[pos:end] if view else bytes(buf[pos:end])), end

    return read


def bytes_writer(compact: bool, nullable: bool) -> Writer:
    def write(out: bytearray, value: Any, extra: list[Any]) -> None:
        if value is None:
            if not nullable:
                raise ValueError("None for non-nullable bytes")
            if compact:
                out.append(0)
            else:
                out += b"\xff\xff\xff\xff"
            return
        n = len(value) if not isinstance(value, memoryview) else value.nbytes
        if compact:
            write_uvarint(out, n + 1)
        else:
            out += _pack_int32(n)
        out += value

    return write


# ---------------------------------------------------------------- records


def _chunk_size(chunk: Any) -> int:
    if type(chunk) is FileRegion:
        return chunk.size
    if type(chunk) is memoryview:
        return chunk.nbytes
    return len(chunk)


def records_size(value: Any) -> int:
    """Bytes a records value occupies, without reading FileRegions."""
    if type(value) is list or type(value) is tuple:
        return sum(_chunk_size(c) for c in value)
    return _chunk_size(value)


def _append_chunk(out: bytearray, chunk: Any, extra: list[Any]) -> None:
    if type(chunk) is FileRegion:
        if chunk.size:
            extra.append((len(out), chunk))
    elif _chunk_size(chunk) >= INLINE_RECORDS_MAX:
        extra.append((len(out), chunk))
    else:
        out += chunk


def records_writer(compact: bool, nullable: bool) -> Writer:
    """Writes bytes/bytearray/memoryview/FileRegion/None or a list of those (sent back to
    back as one records field). Only the length prefix is computed here; large buffers and
    file regions go to ``extra`` uncopied."""

    def write(out: bytearray, value: Any, extra: list[Any]) -> None:
        if value is None:
            if not nullable:
                # Kafka sends an empty record set where records are not nullable.
                out += b"\x01" if compact else b"\x00\x00\x00\x00"
                return
            out += b"\x00" if compact else b"\xff\xff\xff\xff"
            return
        size = records_size(value)
        if compact:
            write_uvarint(out, size + 1)
        else:
            out += _pack_int32(size)
        if type(value) is list or type(value) is tuple:
            for chunk in value:
                _append_chunk(out, chunk, extra)
        else:
            _append_chunk(out, value, extra)

    return write


# ---------------------------------------------------------------- arrays


def array_reader(
    elem: Reader, elem_min_size: int, compact: bool, nullable: bool, scalar_fmt: str | None
) -> Reader:
    """Reader for an array of ``elem``. A count that could not fit in the bytes left (at
    ``elem_min_size`` bytes per element) is rejected before any element is read.
    ``scalar_fmt`` reads arrays of fixed-width scalars in one struct call."""
    min_size = max(elem_min_size, 1)

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        n, pos = _read_size(buf, pos, compact, nullable, "array count")
        if n is None:
            return None, pos
        if n * min_size > len(buf) - pos:
            raise ProtocolError(f"array count {n} at byte {pos} exceeds the bytes left")
        if scalar_fmt is not None:
            fmt = struct.Struct(f">{n}{scalar_fmt}")
            return list(fmt.unpack_from(buf, pos)), pos + fmt.size
        items: list[Any] = []
        append = items.append
        for _ in range(n):
            item, pos = elem(buf, pos)
            append(item)
        return items, pos

    return read


class PreEncoded(bytes):
    """A field value already encoded for the version being written (an array with its
    length prefix): written as is. For handlers that cache a large, rarely changing part
    of a response (the partitions of a topic in Metadata) instead of re-encoding it."""

    __slots__ = ()


def array_writer(elem: Writer, compact: bool, nullable: bool, scalar_fmt: str | None) -> Writer:
    def write(out: bytearray, value: Any, extra: list[Any]) -> None:
        if type(value) is PreEncoded:
            out += value
            return
        if value is None:
            if not nullable:
                raise ValueError("None for a non-nullable array")
            out += b"\x00" if compact else b"\xff\xff\xff\xff"
            return
        n = len(value)
        if compact:
            write_uvarint(out, n + 1)
        else:
            out += _pack_int32(n)
        if scalar_fmt is not None:
            out += struct.pack(f">{n}{scalar_fmt}", *value)
            return
        for item in value:
            elem(out, item, extra)

    return write
