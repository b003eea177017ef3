"""Hypothesis strategies for message bodies, derived from our declarations, and a
normal form for comparing decoded values across codecs."""

from __future__ import annotations

import functools
import uuid

from hypothesis import strategies as st

from pykfk.protocol.schema import Field, Schema

_INT_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}


def _scalar(type_name: str) -> st.SearchStrategy:
    if type_name in _INT_BOUNDS:
        lo, hi = _INT_BOUNDS[type_name]
        return st.one_of(st.sampled_from([lo, hi, -1, 0]), st.integers(lo, hi))
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "string":
        return st.text(max_size=6)
    if type_name in ("bytes", "records"):
        return st.binary(max_size=8)
    if type_name == "uuid":
        return st.uuids()
    raise AssertionError(type_name)


def _field(field: Field, version: int) -> st.SearchStrategy:
    if field.schema is not None:
        inner = body(field.schema, version)
    else:
        base = field.type_name[2:] if field.is_array else field.type_name
        inner = _scalar(base)
    value = st.lists(inner, max_size=3) if field.is_array else inner
    if field.nullable_in(version):
        value = st.one_of(st.none(), value)
    return value


@functools.cache
def body(schema: Schema, version: int) -> st.SearchStrategy:
    """Dicts with a value for every field present in ``version``."""
    return st.fixed_dictionaries(
        {f.name: _field(f, version) for f in schema.fields if f.present_in(version)}
    )


def normal(schema: Schema, version: int, value) -> dict:
    """Plain dict of the fields present in ``version``: views and bytearrays as bytes,
    tuples as lists, nested structs likewise. Works on our Structs, plain dicts and
    kafka-python's ``to_dict(json=False)`` output."""
    out = {}
    for f in schema.fields:
        if not f.present_in(version):
            continue
        v = value.get(f.name, f.default)
        out[f.name] = _normal_value(f, version, v)
    return out


def _normal_value(field: Field, version: int, v):
    if v is None:
        if field.schema is not None and not field.is_array and not field.nullable_in(version):
            return normal(field.schema, version, {})
        if field.is_array and not field.nullable_in(version):
            return []
        return None
    if field.is_array:
        if field.schema is not None:
            return [normal(field.schema, version, item) for item in v]
        return [_scalar_normal(x) for x in v]
    if field.schema is not None:
        return normal(field.schema, version, v)
    return _scalar_normal(v)


def _scalar_normal(v):
    if isinstance(v, (memoryview, bytearray)):
        return bytes(v)
    if isinstance(v, uuid.UUID):
        return v
    return v
