"""Generic table-driven encoder/decoder for declared Kafka structs. Sans-io.

For each (struct, version, flexible) the declaration is compiled once into a list of
steps: runs of consecutive fixed-width fields become a single struct.Struct
pack/unpack, every other field gets the reader/writer chosen for its encoding in that
version, and flexible versions end each struct with its tagged-field section:

    tagged fields   uvarint count, then per field: uvarint tag, uvarint size, data
                    (tags ascending; fields equal to their default are omitted)
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import types as t
from .types import Decoder, Encoder, ProtocolError, Struct, read_uvarint, write_uvarint

if TYPE_CHECKING:
    from .fields import Field, Schema

__all__ = ["Decoder", "Encoder", "decoder", "encoder"]

_int8 = struct.Struct(">b")


def _fixed(field: Field) -> bool:
    """Fixed-width scalar field that can join a merged struct.Struct run."""
    return not field.is_array and field.schema is None and field.element.fmt is not None  # type: ignore[union-attr]


def _field_min_size(field: Field, version: int, compact: bool) -> int:
    if field.is_array:
        return 1 if compact else 4
    if field.schema is not None:
        if field.nullable_in(version):
            return 1
        return struct_min_size(field.schema, version, compact)
    prim: t.Primitive = field.element  # type: ignore[assignment]
    return prim.compact_min_size if compact else prim.min_size


def struct_min_size(schema: Schema, version: int, flexible: bool) -> int:
    """Least number of bytes one instance occupies (bounds array counts on decode)."""
    size = 1 if flexible else 0  # the tagged-field count
    for f in schema.fields:
        if f.present_in(version) and not (flexible and f.tagged_in(version)):
            size += _field_min_size(f, version, flexible and f.flexible)
    return size


# ---------------------------------------------------------------- readers


def _element_reader(field: Field, version: int, flexible: bool) -> tuple[t.Reader, int, str | None]:
    """(reader, min size, scalar struct format) for one array element."""
    compact = flexible and field.flexible
    if field.schema is not None:
        return (
            decoder(field.schema, version, flexible),
            struct_min_size(field.schema, version, flexible),
            None,
        )
    prim: t.Primitive = field.element  # type: ignore[assignment]
    return (
        _scalar_reader(prim, compact, False),
        prim.compact_min_size if compact else prim.min_size,
        (prim.fmt if prim is not t.BOOL else None),
    )


def _scalar_reader(prim: t.Primitive, compact: bool, nullable: bool) -> t.Reader:
    if prim is t.STRING:
        return t.string_reader(compact, nullable)
    if prim is t.BYTES:
        return t.bytes_reader(compact, nullable, view=False)
    if prim is t.RECORDS:
        return t.bytes_reader(compact, nullable, view=True)
    return t.fixed_reader(prim)


def field_reader(field: Field, version: int, flexible: bool) -> t.Reader:
    compact = flexible and field.flexible
    nullable = field.nullable_in(version)
    if field.is_array:
        elem, min_size, fmt = _element_reader(field, version, flexible)
        return t.array_reader(elem, min_size, compact, nullable, fmt)
    if field.schema is not None:
        inner = decoder(field.schema, version, flexible)
        if not nullable:
            return inner

        # Nullable structs carry an int8 presence marker (-1 null, 1 present).
        def read_nullable_struct(buf: memoryview, pos: int) -> tuple[Any, int]:
            (marker,) = _int8.unpack_from(buf, pos)
            if marker < 0:
                return None, pos + 1
            return inner(buf, pos + 1)

        return read_nullable_struct
    return _scalar_reader(field.element, compact, nullable)  # type: ignore[arg-type]


def _packed_struct(fields: list[Field]) -> struct.Struct:
    """One struct.Struct for a run of fixed-size scalar fields (each has a ``fmt``)."""
    formats = [getattr(f.element, "fmt", None) for f in fields]
    assert all(isinstance(fmt, str) for fmt in formats), "a run holds fixed-size scalars only"
    return struct.Struct(">" + "".join(str(fmt) for fmt in formats))


def _run_step(fields: list[Field]) -> Callable[[memoryview, int, Struct], int]:
    fmt = _packed_struct(fields)
    unpack = fmt.unpack_from
    size = fmt.size
    names = tuple(f.name for f in fields)
    if len(names) == 1:
        (name,) = names

        def read_one(buf: memoryview, pos: int, d: Struct) -> int:
            d[name] = unpack(buf, pos)[0]
            return pos + size

        return read_one

    def read_run(buf: memoryview, pos: int, d: Struct) -> int:
        d.update(zip(names, unpack(buf, pos)))
        return pos + size

    return read_run


def _var_step(name: str, read: t.Reader) -> Callable[[memoryview, int, Struct], int]:
    def step(buf: memoryview, pos: int, d: Struct) -> int:
        d[name], pos = read(buf, pos)
        return pos

    return step


def _tagged_section_reader(
    tagged: dict[int, tuple[str, t.Reader]],
) -> Callable[[memoryview, int, Struct], int]:
    def read_tagged(buf: memoryview, pos: int, d: Struct) -> int:
        count, pos = read_uvarint(buf, pos)
        if count * 2 > len(buf) - pos:
            raise ProtocolError(f"tagged field count {count} at byte {pos} exceeds the bytes left")
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise ProtocolError(f"tagged field {tag} of {size} bytes runs past the frame")
            entry = tagged.get(tag)
            if entry is not None:
                name, read = entry
                value, used = read(buf[:end], pos)
                if used != end:
                    raise ProtocolError(
                        f"tagged field {tag} declares {size} bytes, holds {used - pos}"
                    )
                d[name] = value
            pos = end  # unknown tags are skipped, as Kafka does
        return pos

    return read_tagged


def decoder(schema: Schema, version: int, flexible: bool) -> Decoder:
    """The compiled decoder of ``schema`` at ``version`` (cached on the schema)."""
    key = (version, flexible)
    cached = schema.decoders.get(key)
    if cached is not None:
        return cached
    defaults = {f.name: f.default for f in schema.fields}
    steps: list[Callable[[memoryview, int, Struct], int]] = []
    tagged: dict[int, tuple[str, t.Reader]] = {}
    run: list[Field] = []
    for f in schema.fields:
        if not f.present_in(version):
            continue
        if flexible and f.tagged_in(version):
            tagged[f.tag] = (f.name, field_reader(f, version, flexible))  # type: ignore[index]
            continue
        if _fixed(f):
            run.append(f)
            continue
        if run:
            steps.append(_run_step(run))
            run = []
        steps.append(_var_step(f.name, field_reader(f, version, flexible)))
    if run:
        steps.append(_run_step(run))
    if flexible:
        steps.append(_tagged_section_reader(tagged))
    steps_t = tuple(steps)

    def decode(buf: memoryview, pos: int) -> tuple[Struct, int]:
        d = Struct(defaults)
        for step in steps_t:
            pos = step(buf, pos, d)
        return d, pos

    schema.decoders[key] = decode
    return decode


# ---------------------------------------------------------------- writers


def _scalar_writer(prim: t.Primitive, compact: bool, nullable: bool) -> t.Writer:
    if prim is t.STRING:
        return t.string_writer(compact, nullable)
    if prim is t.BYTES:
        return t.bytes_writer(compact, nullable)
    if prim is t.RECORDS:
        return t.records_writer(compact, nullable)
    return t.fixed_writer(prim)


def field_writer(field: Field, version: int, flexible: bool) -> t.Writer:
    compact = flexible and field.flexible
    nullable = field.nullable_in(version)
    if field.is_array:
        if field.schema is not None:
            elem = encoder(field.schema, version, flexible)
            fmt = None
        else:
            prim: t.Primitive = field.element  # type: ignore[assignment]
            elem = _scalar_writer(prim, compact, False)
            fmt = prim.fmt if prim is not t.BOOL else None
        return t.array_writer(elem, compact, nullable, fmt)
    if field.schema is not None:
        inner = encoder(field.schema, version, flexible)

        def write_struct(out: bytearray, value: Any, extra: list[Any]) -> None:
            if nullable:
                if value is None:
                    out.append(0xFF)
                    return
                out.append(1)
            inner(out, Struct() if value is None else value, extra)

        return write_struct
    return _scalar_writer(field.element, compact, nullable)  # type: ignore[arg-type]


def _is_default(value: Any, default: Any) -> bool:
    if value is None or default is None:
        return value is default
    if default == ():
        return len(value) == 0
    return bool(value == default)


def encoder(schema: Schema, version: int, flexible: bool) -> Encoder:
    """The compiled encoder of ``schema`` at ``version`` (cached on the schema).
    Missing keys take the field default."""
    key = (version, flexible)
    cached = schema.encoders.get(key)
    if cached is not None:
        return cached
    steps: list[Callable[[bytearray, Any, list[Any]], None]] = []
    tagged: list[tuple[int, str, Any, t.Writer]] = []
    run: list[Field] = []

    def flush_run() -> None:
        fmt = _packed_struct(run)
        pack = fmt.pack
        names = tuple(f.name for f in run)
        defaults = tuple(f.default for f in run)

        def write_run(out: bytearray, body: Any, extra: list[Any]) -> None:
            out += pack(*map(body.get, names, defaults))

        steps.append(write_run)

    for f in schema.fields:
        if not f.present_in(version):
            continue
        if flexible and f.tagged_in(version):
            tagged.append((f.tag, f.name, f.default, field_writer(f, version, flexible)))  # type: ignore[arg-type]
            continue
        if _fixed(f):
            run.append(f)
            continue
        if run:
            flush_run()
            run = []
        steps.append(_var_write_step(f.name, f.default, field_writer(f, version, flexible)))
    if run:
        flush_run()
    if flexible:
        tagged.sort(key=lambda entry: entry[0])
        steps.append(_tagged_section_writer(tuple(tagged)))
    steps_t = tuple(steps)

    def encode(out: bytearray, body: Any, extra: list[Any]) -> None:
        for step in steps_t:
            step(out, body, extra)

    schema.encoders[key] = encode
    return encode


def _var_write_step(
    name: str, default: Any, write: t.Writer
) -> Callable[[bytearray, Any, list[Any]], None]:
    def step(out: bytearray, body: Any, extra: list[Any]) -> None:
        write(out, body.get(name, default), extra)

    return step


def _tagged_section_writer(
    tagged: tuple[tuple[int, str, Any, t.Writer], ...],
) -> Callable[[bytearray, Any, list[Any]], None]:
    if not tagged:

        def write_empty(out: bytearray, body: Any, extra: list[Any]) -> None:
            out.append(0)

        return write_empty

    def write_tagged(out: bytearray, body: Any, extra: list[Any]) -> None:
        present = []
        for tag, name, default, write in tagged:
            value = body.get(name, default)
            if _is_default(value, default):
                continue
            data = bytearray()
            inner_extra: list[Any] = []
            write(data, value, inner_extra)
            if inner_extra:
                raise ValueError(f"tagged field {name} cannot carry file regions or large buffers")
            present.append((tag, data))
        write_uvarint(out, len(present))
        for tag, data in present:
            write_uvarint(out, tag)
            write_uvarint(out, len(data))
            out += data

    return write_tagged


# ---------------------------------------------------------------- chunk assembly


def chunks_from(out: bytearray, extra: list[Any], start: int = 0) -> list[Any]:
    """Split ``out[start:]`` at the positions recorded in ``extra`` into a list of bytes
    and pass-through chunks (FileRegion, large buffers), in wire order. Adjacent inline
    data is one bytes chunk."""
    if not extra:
        return [bytes(out) if start == 0 else bytes(memoryview(out)[start:])]
    chunks: list[Any] = []
    prev = start
    with memoryview(out) as view:
        for pos, chunk in extra:
            if pos > prev:
                chunks.append(bytes(view[prev:pos]))
                prev = pos
            chunks.append(chunk)
        if prev < len(out):
            chunks.append(bytes(view[prev:]))
    return chunks


def extra_size(extra: list[Any]) -> int:
    return sum(t.records_size(chunk) for _, chunk in extra)
