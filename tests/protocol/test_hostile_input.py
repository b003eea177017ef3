"""Decoding bytes an attacker or a broken client controls: every failure is a
ProtocolError, never another exception, a crash or an allocation beyond the frame."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykfk.protocol import API_SPECS, ProtocolError, UnsupportedVersionError, decode_request
from pykfk.protocol.framing import decode_request_header, encode_request
from pykfk.protocol.types import read_uvarint

from .values import body

_PRODUCE_V7 = encode_request(
    0,
    7,
    1,
    "c",
    {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 100,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"r" * 20}]}],
    },
)[4:]
_FETCH_V12 = encode_request(
    1,
    12,
    2,
    "c",
    {
        "cluster_id": "tagged",
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5}]}],
        "forgotten_topics_data": [{"topic": "old", "partitions": [1, 2]}],
        "rack_id": "r",
    },
)[4:]
_API_VERSIONS_V3 = encode_request(
    18, 3, 3, "c", {"client_software_name": "a", "client_software_version": "b"}
)[4:]


@pytest.mark.parametrize(
    "frame", [_PRODUCE_V7, _FETCH_V12, _API_VERSIONS_V3], ids=["produce7", "fetch12", "apiv3"]
)
def test_every_truncation_is_a_protocol_error(frame):
    decode_request(frame)  # the whole frame is fine
    for cut in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:cut])


@pytest.mark.parametrize("frame", [_PRODUCE_V7, _FETCH_V12], ids=["produce7", "fetch12"])
def test_trailing_bytes_are_rejected(frame):
    with pytest.raises(ProtocolError, match="trailing"):
        decode_request(frame + b"\x00")


def _produce_v3_header() -> bytes:
    return struct.pack(">hhih", 0, 3, 9, 1) + b"c"


def test_negative_array_count():
    frame = _produce_v3_header() + b"\xff\xff" + struct.pack(">hii", 1, 10, -2)
    with pytest.raises(ProtocolError, match="negative array count"):
        decode_request(frame)


def test_null_for_a_non_nullable_array():
    frame = _produce_v3_header() + b"\xff\xff" + struct.pack(">hii", 1, 10, -1)
    with pytest.raises(ProtocolError, match="null array"):
        decode_request(frame)


def test_huge_array_count_is_rejected_without_allocating():
    frame = (
        _produce_v3_header() + b"\xff\xff" + struct.pack(">hii", 1, 10, 0x7FFFFFFF) + b"\x00" * 16
    )
    tracemalloc.start()
    try:
        with pytest.raises(ProtocolError, match="exceeds the bytes left"):
            decode_request(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_huge_scalar_array_count_is_rejected():
    # Fetch v7 forgotten_topics_data[0].partitions is an int32 array read in one call.
    body = struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, -1) + struct.pack(">i", 0)
    body += struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 0x10000000)
    frame = struct.pack(">hhih", 1, 7, 1, -1) + body
    with pytest.raises(ProtocolError, match="exceeds the bytes left"):
        decode_request(frame)


def test_oversized_string_and_records_lengths():
    with pytest.raises(ProtocolError, match="runs past"):
        decode_request(_produce_v3_header() + struct.pack(">h", 0x7FFF) + b"tx")
    topic = struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + struct.pack(">i", 0)
    frame = (
        _produce_v3_header()
        + b"\xff\xff"
        + struct.pack(">hii", 1, 10, 1)
        + topic
        + struct.pack(">i", 1 << 30)
    )
    with pytest.raises(ProtocolError, match="runs past"):
        decode_request(frame)


def test_negative_lengths():
    with pytest.raises(ProtocolError, match="negative string length"):
        decode_request(_produce_v3_header() + struct.pack(">h", -5))
    topic = struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + struct.pack(">i", 0)
    frame = (
        _produce_v3_header()
        + b"\xff\xff"
        + struct.pack(">hii", 1, 10, 1)
        + topic
        + struct.pack(">i", -7)
    )
    with pytest.raises(ProtocolError, match="negative bytes length"):
        decode_request(frame)


def test_invalid_utf8():
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_request(_produce_v3_header() + struct.pack(">h", 2) + b"\xff\xfe")
    with pytest.raises(ProtocolError, match="UTF-8"):
        decode_request_header(struct.pack(">hhih", 0, 3, 9, 1) + b"\xff")


@pytest.mark.parametrize(
    "varint,message",
    [
        (b"\xff\xff\xff\xff\xff\x01", "longer than 5 bytes"),
        (b"\xff\xff\xff\xff\x7f", "32 bits"),
        (b"\x80", None),
    ],
)
def test_bad_varints(varint, message):
    frame = struct.pack(">hhih", 18, 3, 1, -1) + b"\x00" + varint
    with pytest.raises(ProtocolError, match=message):
        decode_request(frame)


def test_tagged_field_bounds():
    head = struct.pack(">hhih", 18, 3, 1, -1) + b"\x00" + b"\x01\x01"  # header + two empty strings
    with pytest.raises(ProtocolError, match="exceeds the bytes left"):
        decode_request(head + b"\x7f")  # 127 tagged fields in 0 bytes
    with pytest.raises(ProtocolError, match="runs past"):
        decode_request(head + b"\x01\x05\x10" + b"x")  # tag 5 claims 16 bytes
    # unknown tags are skipped
    _, req = decode_request(head + b"\x01\x05\x02zz")
    assert req.client_software_name == ""


def test_known_tagged_field_with_wrong_size():
    head = struct.pack(">hhih", 1, 12, 1, -1) + b"\x00"
    fixed = struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0) + b"\x01\x01\x01"  # empty arrays, rack_id
    # cluster_id (tag 0) declares 3 bytes but its compact string holds 1
    with pytest.raises(ProtocolError, match="declares 3 bytes"):
        decode_request(head + fixed + b"\x01\x00\x03\x02ab")
    _, req = decode_request(head + fixed + b"\x01\x00\x03\x03ab")
    assert req.cluster_id == "ab"


def test_unknown_api_and_version():
    with pytest.raises(UnsupportedVersionError):
        decode_request(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(UnsupportedVersionError):
        decode_request(struct.pack(">hhih", 0, 99, 1, -1) + b"\x00")
    with pytest.raises(ProtocolError):
        decode_request_header(b"\x00\x01")


def test_uvarint_reader_limits():
    assert read_uvarint(memoryview(b"\xff\xff\xff\xff\x0f"), 0) == (0xFFFFFFFF, 5)
    with pytest.raises(IndexError):
        read_uvarint(memoryview(b"\x80\x80"), 0)


_CASES = [(s, v) for s in API_SPECS.values() for v in range(s.min_version, s.max_version + 1)]


@pytest.mark.parametrize("spec,version", _CASES, ids=[f"{s.name}-v{v}" for s, v in _CASES])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_corrupted_requests_fail_cleanly(spec, version, data):
    """Valid requests with random bytes overwritten, inserted or cut: decoding either
    succeeds or raises ProtocolError."""
    raw = bytearray(spec.encode_request(data.draw(body(spec.request, version)), version))
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(raw)))
        action = data.draw(st.sampled_from(["overwrite", "insert", "cut"]))
        chunk = data.draw(st.binary(min_size=1, max_size=4))
        if action == "overwrite":
            raw[pos : pos + len(chunk)] = chunk
        elif action == "insert":
            raw[pos:pos] = chunk
        else:
            del raw[pos : pos + len(chunk)]
    try:
        spec.decode_request(raw, 0, version)
    except ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_random_frames_fail_cleanly(data):
    try:
        decode_request(data)
    except ProtocolError:
        pass
