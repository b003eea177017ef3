"""The generic codec's rules: defaults, nullability by version, compact encodings and
tagged fields in flexible versions, Struct access."""

from __future__ import annotations

import struct

import pytest

from pykfk.protocol import API_SPECS, FileRegion, Struct
from pykfk.protocol.schema import ApiSpec, Field

PRODUCE = API_SPECS[0]
API_VERSIONS = API_SPECS[18]


def test_decoded_struct_has_every_declared_field():
    raw = PRODUCE.encode_request({"acks": 1, "timeout_ms": 5, "topic_data": []}, 0)
    req = PRODUCE.decode_request(raw, 0, 0)
    assert req.transactional_id is None  # absent in v0: the default
    assert req.acks == 1 and req["timeout_ms"] == 5
    assert isinstance(req, Struct) and isinstance(req, dict)
    with pytest.raises(AttributeError):
        _ = req.no_such_field
    req.acks = -1
    assert req["acks"] == -1


def test_missing_fields_encode_as_defaults():
    body = {"responses": [{"name": "t", "partition_responses": [{"index": 0}]}]}
    resp = PRODUCE.decode_response(b"".join(PRODUCE.encode_response(body, 7)), 0, 7)
    part = resp.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset, part.log_append_time_ms, part.log_start_offset) == (
        0,
        0,
        -1,
        -1,
    )
    assert resp.throttle_time_ms == 0


def test_fields_absent_in_a_version_are_not_written():
    body = {"transactional_id": "tx", "acks": 1, "timeout_ms": 2, "topic_data": []}
    assert PRODUCE.encode_request(body, 2) == struct.pack(">hii", 1, 2, 0)
    assert PRODUCE.encode_request(body, 3) == struct.pack(">h", 2) + b"tx" + struct.pack(
        ">hii", 1, 2, 0
    )


def test_null_in_a_non_nullable_field_is_an_encode_error():
    with pytest.raises(ValueError, match="Produce v7"):
        PRODUCE.encode_request({"topic_data": [{"name": None, "partition_data": []}]}, 7)
    with pytest.raises(ValueError):
        PRODUCE.encode_request({"acks": None}, 7)


def test_compact_encodings_in_flexible_versions():
    body = {
        "acks": 1,
        "timeout_ms": 2,
        "transactional_id": None,
        "topic_data": [{"name": "ab", "partition_data": [{"index": 0, "records": b"xyz"}]}],
    }
    raw = PRODUCE.encode_request(body, 9)
    expected = (
        b"\x00"  # null compact string
        + struct.pack(">hi", 1, 2)
        + b"\x02"  # 1 topic
        + b"\x03ab"
        + b"\x02"
        + struct.pack(">i", 0)
        + b"\x04xyz"
        + b"\x00"  # partition + its tags
        + b"\x00"  # topic tags
        + b"\x00"  # top-level tags
    )
    assert raw == expected
    assert (
        bytes(PRODUCE.decode_request(raw, 0, 9).topic_data[0].partition_data[0].records) == b"xyz"
    )


def test_tagged_fields_written_only_when_not_default():
    base = {"error_code": 0, "api_keys": [], "throttle_time_ms": 0}
    plain = b"".join(API_VERSIONS.encode_response(base, 3))
    assert plain.endswith(b"\x00")
    tagged = b"".join(
        API_VERSIONS.encode_response(
            dict(base, finalized_features_epoch=5, zk_migration_ready=True), 3
        )
    )
    assert (
        tagged[len(plain) - 1 :] == b"\x02" + b"\x01\x08" + struct.pack(">q", 5) + b"\x03\x01\x01"
    )
    resp = API_VERSIONS.decode_response(tagged, 0, 3)
    assert resp.finalized_features_epoch == 5 and resp.zk_migration_ready is True
    assert API_VERSIONS.decode_response(plain, 0, 3).finalized_features_epoch == -1


def test_records_accepts_every_documented_form():
    for value, expected in [
        (None, b"\xff\xff\xff\xff"),
        (b"ab", b"\x00\x00\x00\x02ab"),
        (bytearray(b"ab"), b"\x00\x00\x00\x02ab"),
        (memoryview(b"ab"), b"\x00\x00\x00\x02ab"),
        ([b"a", memoryview(b"b")], b"\x00\x00\x00\x02ab"),
    ]:
        body = {"topic_data": [{"name": "", "partition_data": [{"index": 0, "records": value}]}]}
        assert PRODUCE.encode_request(body, 3).endswith(expected)
    region = FileRegion(5, 100, 7)
    chunks = API_SPECS[1].encode_response({"responses": [{"partitions": [{"records": region}]}]}, 4)
    assert chunks[1] is region and chunks[0].endswith(struct.pack(">i", 7))


def test_struct_declarations_are_checked():
    with pytest.raises(ValueError):
        Field("x", "[]Thing")  # struct type without fields
    with pytest.raises(ValueError):
        Field("x", "int32", fields=[Field("y", "int8")])
    spec = ApiSpec(
        1000,
        "Demo",
        versions="0-1",
        flexible="1+",
        request=[
            Field("a", "int8"),
            Field("b", "[]int16", "1+"),
            Field("c", "uuid", "1+"),
            Field("d", "float64"),
        ],
        response=[],
    )
    raw = spec.encode_request({"a": 1, "b": [1, 2], "d": 0.5}, 1)
    req = spec.decode_request(raw, 0, 1)
    assert (req.a, req.b, req.d) == (1, [1, 2], 0.5) and req.c.int == 0
    assert spec.decode_request(spec.encode_request({"a": 1, "b": [3]}, 0), 0, 0).b == ()


def test_version_rules():
    assert PRODUCE.request_header_version(8) == 1 and PRODUCE.request_header_version(9) == 2
    assert PRODUCE.response_header_version(9) == 1
    assert API_VERSIONS.request_header_version(3) == 2
    assert API_VERSIONS.response_header_version(3) == 0
    assert API_SPECS[17].flexible_from is None and not API_SPECS[17].is_flexible(1)
