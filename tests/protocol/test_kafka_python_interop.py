"""Differential tests against kafka-python's own message codecs (PyPI kafka-python,
built from the Kafka JSON specs): for generated bodies of every API, version and
direction, kafka-python decodes what we encode to the same values, re-encodes it to the
same bytes, and we decode kafka-python's bytes back to the same values.

Versions whose layout the shipped (Kafka 4.x) spec no longer describes are skipped here
and covered by test_legacy_versions.py.
"""

from __future__ import annotations

import functools

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer
import kafka.protocol.sasl  # noqa: F401
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_message import ApiMessage

from pykfk.protocol import API_SPECS

from .spec_json import load_spec, shipped
from .test_spec_crosscheck import _compare
from .values import body, normal


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


@functools.cache
def kafka_python_class(message_name: str):
    for cls in _subclasses(ApiMessage):
        if getattr(cls, "_class_version", None) is None and cls.name == message_name:
            return cls
    raise LookupError(message_name)


def _as_dict(obj, schema, version) -> dict:
    """kafka-python message -> plain dict by attribute (its to_dict renders some fields,
    e.g. authorized operations, in a friendlier form than the wire value)."""
    out = {}
    for f in schema.fields:
        if not f.present_in(version):
            continue
        if f.type_name == "int32" and f.name.endswith("authorized_operations") and hasattr(
                obj, "authorized_operations"):
            out[f.name] = _bitfield_to_int32(obj.authorized_operations)
            continue
        v = getattr(obj, f.name)
        if f.schema is not None and v is not None:
            v = (
                [_as_dict(x, f.schema, version) for x in v]
                if f.is_array
                else _as_dict(v, f.schema, version)
            )
        out[f.name] = v
    return out


def _bitfield_to_int32(bits) -> int:
    """kafka-python reads authorized-operation fields as a set of bit numbers (None for
    the "not requested" value INT32_MIN); back to the wire int32."""
    if bits is None:
        return -(2**31)
    value = sum(1 << b for b in bits)
    return value - 2**32 if value >= 2**31 else value


def _layout_matches_spec(spec, kind, version) -> bool:
    schema = spec.request if kind == "Request" else spec.response
    return _compare(schema, load_spec(spec.name + kind)["fields"], version, schema.name) == []


_CASES = [
    (spec, kind, version)
    for spec in shipped(list(API_SPECS.values()))
    for kind in ("Request", "Response")
    for version in range(spec.min_version, spec.max_version + 1)
    if _layout_matches_spec(spec, kind, version)
]


def _ours_encode(spec, kind, value, version) -> bytes:
    if kind == "Request":
        return spec.encode_request(value, version)
    return b"".join(spec.encode_response(value, version))


def _ours_decode(spec, kind, data, version):
    if kind == "Request":
        return spec.decode_request(data, 0, version)
    return spec.decode_response(data, 0, version)


@pytest.mark.parametrize(
    "spec,kind,version", _CASES, ids=[f"{s.name}{k}-v{v}" for s, k, v in _CASES]
)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_and_values_as_kafka_python(spec, kind, version, data):
    schema = spec.request if kind == "Request" else spec.response
    value = data.draw(body(schema, version))
    if spec.name == "ApiVersions" and kind == "Response":
        # kafka-python reads any error response as v0 (the KIP-511 fallback layout).
        value["error_code"] = 0
    expected = normal(schema, version, value)
    ours = _ours_encode(spec, kind, value, version)

    theirs_obj = kafka_python_class(spec.name + kind).decode(ours, version=version)
    assert normal(schema, version, _as_dict(theirs_obj, schema, version)) == expected
    theirs_obj.with_header(correlation_id=0)  # some of its encoders expect a header slot
    theirs = bytes(theirs_obj.encode())
    assert theirs == ours
    assert normal(schema, version, _ours_decode(spec, kind, theirs, version)) == expected


def test_cases_cover_every_api_kafka_python_ships():
    assert {s.api_key for s, _, _ in _CASES} == {s.api_key for s in shipped(list(API_SPECS.values()))}
