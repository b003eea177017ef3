"""The compiled Produce, Fetch and Metadata codecs (``src/_core/wire.pyx``,
``metadata.pyx``) spell their field layout out by hand; this checks it against the
declarations in ``pykfk/protocol/messages/``: every field name they read or write is a
declared field of that message, with the declared width, default, nullability and first
version. The differential tests (``test_fast_path_*.py``) compare bytes on sample
bodies; this names the field when a declaration and an encoder part ways."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from pykfk._core.wire import decode_fetch
from pykfk.protocol import API_SPECS, typed
from pykfk.protocol.fields import _OPEN, Field, Schema
from pykfk.server.handlers.metadata import PARTITION_FIELDS

CORE = Path(__file__).resolve().parents[2] / "src" / "_core"
WIDTHS = {"int8": 1, "int16": 2, "int32": 4, "int64": 8}
# The compiled readers and the spec types they read.
READERS = {"_int8": "int8", "_int16": "int16", "_int32": "int32", "_int64": "int64", "_uuid": "uuid",
           "_string": "string"}
PRODUCE, FETCH, METADATA = 0, 1, 3

_FUNCTION = re.compile(r"^(?:cdef|cpdef|def)\b[^(]*?(\w+)\(")
_GUARD = re.compile(r"^\s*(?:el)?if version >= (\d+)\b")
_PUT = re.compile(r'_put_(int|string|uuid)\(&?o, _get\(\w+, "(\w+)", ([^)]*)\)(?:, (\d+)|, compact, (True|False))?\)')
_GET = re.compile(r'_get\(\w+, "(\w+)"')
_SET = re.compile(r'PyDict_SetItem\(\w+, "(\w+)", (.*)\)$')


def _fields(schema: Schema) -> list[Field]:
    found = []
    for field in schema.fields:
        found.append(field)
        if field.schema is not None:
            found += _fields(field.schema)
    return found


def _by_name(schema: Schema) -> dict[str, list[Field]]:
    by_name: dict[str, list[Field]] = {}
    for field in _fields(schema):
        by_name.setdefault(field.name, []).append(field)
    return by_name


def _source_lines(name: str) -> list[tuple[str, str, int | None]]:
    """(enclosing function, line, the `version >=` guard the line is under) of a .pyx."""
    out = []
    function = ""
    guards: list[tuple[int, int]] = []  # (indent, version)
    for line in (CORE / name).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        match = _FUNCTION.match(line)
        if match:
            function, guards = match.group(1), []
            continue
        guards = [g for g in guards if g[0] < indent]
        out.append((function, line, guards[-1][1] if guards else None))
        guard = _GUARD.match(line)
        if guard:
            guards.append((indent, int(guard.group(1))))
    return out


def _literal(text: str) -> object:
    text = text.strip()
    return {"None": None, '""': "", "()": (), "True": True, "False": False}.get(text, None) \
        if not re.fullmatch(r"-?\d+", text) else int(text)


def _agrees(field: Field, *, type_name: str | None = None, default: object = ..., first: int | None = None,
            nullable: bool | None = None) -> bool:
    if type_name is not None and field.type_name != type_name:
        return False
    if default is not ... and field.default != default and not (field.is_array and default == ()):
        return False
    if first is not None and field.versions[0] != first:
        return False
    return nullable is None or (field.nullable[0] <= field.nullable[1]) == nullable


def _encoder_checks() -> list[tuple[int, str, str, int | None]]:
    checks = []
    for function, line, guard in _source_lines("wire.pyx"):
        api = PRODUCE if "produce" in function else FETCH if "fetch" in function else None
        if api is not None and "_get(" in line:
            checks.append((api, function, line, guard))
    return checks


@pytest.mark.parametrize(("api", "function", "line", "guard"), _encoder_checks(),
                         ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "")
def test_encoder_fields_are_declared_alike(api: int, function: str, line: str, guard: int | None) -> None:
    by_name = _by_name(API_SPECS[api].response)
    for name in _GET.findall(line):
        assert name in by_name, f"{function}: {name} is no field of {API_SPECS[api].name}Response"
    put = _PUT.search(line)
    if put is None:
        return
    kind, name, default, width, nullable = put.groups()
    candidates = by_name[name]
    wanted: dict[str, object] = {"default": _literal(default)}
    if kind == "int":
        wanted["type_name"] = next(t for t, w in WIDTHS.items() if w == int(width))
    elif kind == "string":
        wanted.update(type_name="string", nullable=nullable == "True")
    else:
        wanted["type_name"] = "uuid"
        wanted.pop("default")
    if guard is not None:
        wanted["first"] = guard
    assert any(_agrees(f, **wanted) for f in candidates), (
        f"{function}: {line.strip()} disagrees with the declaration of {name} "
        f"({[(f.type_name, f.versions, f.default) for f in candidates]})")


def _decoder_checks() -> list[tuple[str, str]]:
    return [(function, line) for function, line, _guard in _source_lines("wire.pyx")
            if "fetch" in function or function in ("_replica_state",) if _SET.search(line)]


@pytest.mark.parametrize(("function", "line"), _decoder_checks(), ids=lambda v: "")
def test_fetch_decoder_fields_are_declared_alike(function: str, line: str) -> None:
    by_name = _by_name(API_SPECS[FETCH].request)
    name, value = _SET.search(line).groups()  # type: ignore[union-attr]
    assert name in by_name, f"{function}: {name} is no field of FetchRequest"
    reader = re.match(r"\[?(_\w+)\(", value)
    wanted: dict[str, object] = {}
    if reader is not None and reader.group(1) in READERS:
        wanted["type_name"] = READERS[reader.group(1)]
        if value.startswith("["):
            wanted["type_name"] = "[]" + READERS[reader.group(1)]
    guarded = re.search(r"if version >= (\d+) else (.+)$", value)
    if guarded:
        wanted.update(first=int(guarded.group(1)), default=_literal(guarded.group(2)))
    until = re.search(r"if version <= (\d+) else (.+)$", value)
    candidates = by_name[name]
    assert any(_agrees(f, **wanted) and (until is None or f.versions[1] == int(until.group(1)))
               for f in candidates), (
        f"{function}: {line.strip()} disagrees with the declaration of {name} "
        f"({[(f.type_name, f.versions, f.default) for f in candidates]})")


def test_fetch_decoder_fills_every_typed_field() -> None:
    """The compiled decoder's Struct holds what the generated FetchRequest types."""
    spec = API_SPECS[FETCH]
    topic = {"topic": "t", "topic_id": uuid.UUID(int=1),
             "partitions": [{"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1}]}
    forgotten = {"topic": "t", "topic_id": uuid.UUID(int=1), "partitions": [0]}
    for version in range(spec.min_version, spec.max_version + 1):
        body = spec.encode_request({"topics": [topic], "forgotten_topics_data": [forgotten]}, version)
        decoded = decode_fetch(body, 0, version)
        assert set(decoded) == set(typed.FetchRequest.__annotations__), version
        assert set(decoded.topics[0]) == set(typed.FetchTopic.__annotations__), version
        assert set(decoded.topics[0].partitions[0]) == set(typed.FetchPartition.__annotations__), version


def test_metadata_partition_layout_is_the_declared_one() -> None:
    """metadata.pyx writes a partition entry's tuple items in the declared field order,
    each at its declared width and first version (PARTITION_FIELDS names the items)."""
    partition = API_SPECS[METADATA].response.field("topics").schema.field("partitions").schema  # type: ignore[union-attr]
    assert PARTITION_FIELDS == tuple(f.name for f in partition.fields)
    source = (CORE / "metadata.pyx").read_text()
    for index, name in enumerate(PARTITION_FIELDS):
        field = partition.field(name)
        if field.is_array:
            assert re.search(rf'_put_nodes\(o, t\[{index}\], "{name}"', source), name
            assert field.type_name == "[]int32", name
        else:
            found = re.search(rf'_int\(t\[{index}\], "{name}", entry, (\d+)\)', source)
            assert found is not None and int(found.group(1)) == 8 * WIDTHS[field.type_name], name
        guard = re.search(rf"if version >= (\d+):\n\s+[^\n]*t\[{index}\]", source)
        first = int(guard.group(1)) if guard else 0
        assert field.versions[0] == first and field.versions[1] == _OPEN, name
