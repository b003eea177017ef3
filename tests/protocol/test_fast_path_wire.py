"""Differential tests: the compiled Produce fast path (pykfk._core.wire) against the generic
table-driven codec, on every Produce version, for valid, truncated and hostile bytes."""

from __future__ import annotations

import random
import struct
import uuid

import pytest

from pykfk._core import wire
from pykfk.protocol import API_SPECS, ProtocolError
from pykfk.protocol.framing import encode_response

SPEC = API_SPECS[0]
VERSIONS = range(SPEC.min_version, SPEC.max_version + 1)


def _batch(n: int) -> bytes:
    return bytes(range(256)) * (n // 256) + bytes(n % 256)


REQUESTS = [
    {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": _batch(700)}]}],
    },
    {
        "transactional_id": "tx-é",
        "acks": -1,
        "timeout_ms": -5,
        "topic_data": [
            {
                "name": "topic-ü",
                "partition_data": [
                    {"index": 3, "records": _batch(61)},
                    {"index": 7, "records": None},
                    {"index": -1, "records": b""},
                ],
            },
            {"name": "", "partition_data": []},
            {"name": "x" * 300, "partition_data": [{"index": 2**31 - 1, "records": _batch(20000)}]},
        ],
    },
    {"transactional_id": "", "acks": 0, "timeout_ms": 0, "topic_data": []},
]


def _generic(body: memoryview, version: int) -> tuple:
    req = SPEC.decode_request(body, 0, version)
    return (
        req.transactional_id,
        req.acks,
        req.timeout_ms,
        [(t.topic_id if version >= 13 else t.name, [(p.index, p.records) for p in t.partition_data])
         for t in req.topic_data],
    )


def _outcome(fn, body: memoryview, version: int):
    try:
        return "ok", fn(body, version)
    except ProtocolError:
        return "error", None


def _fast(body: memoryview, version: int) -> tuple:
    return wire.decode_produce(body, 0, version)


def _assert_same(body: bytes | bytearray, version: int) -> None:
    view = memoryview(bytearray(body))
    generic = _outcome(_generic, view, version)
    fast = _outcome(_fast, view, version)
    assert fast == generic


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("request_index", range(len(REQUESTS)))
def test_valid_requests_decode_as_the_generic_codec(version: int, request_index: int) -> None:
    body = dict(REQUESTS[request_index])
    if version < 3:
        body["transactional_id"] = None
    raw = bytearray(SPEC.encode_request(body, version))
    view = memoryview(raw)
    fast = wire.decode_produce(view, 0, version)
    assert fast == _generic(view, version)
    for _name, partitions in fast[3]:
        for _index, records in partitions:
            if records is not None:
                # A view of the caller's frame: no copy, writable in place.
                assert records.obj is raw
                assert not records.readonly


@pytest.mark.parametrize("version", VERSIONS)
def test_body_offset_is_honoured(version: int) -> None:
    raw = b"HEADER" + SPEC.encode_request(REQUESTS[0], version)
    view = memoryview(bytearray(raw))
    assert wire.decode_produce(view, 6, version) == _generic(memoryview(bytearray(raw[6:])), version)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_fails_like_the_generic_codec(version: int) -> None:
    body = dict(REQUESTS[1])
    if version < 3:
        body["transactional_id"] = None
    raw = SPEC.encode_request(body, version)
    for cut in range(len(raw)):
        if cut > 400 and cut < len(raw) - 64 and cut % 97:
            continue  # the long records run: sample it
        _assert_same(raw[:cut], version)
        with pytest.raises(ProtocolError):
            wire.decode_produce(bytearray(raw[:cut]), 0, version)
    with pytest.raises(ProtocolError):
        wire.decode_produce(bytearray(raw + b"\x00"), 0, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_random_mutations_agree_with_the_generic_codec(version: int) -> None:
    rng = random.Random(version)
    body = dict(REQUESTS[1])
    if version < 3:
        body["transactional_id"] = None
    body["topic_data"] = body["topic_data"][:2]
    raw = SPEC.encode_request(body, version)
    for _ in range(1500):
        mutated = bytearray(raw)
        for _ in range(rng.randint(1, 3)):
            pos = rng.randrange(len(mutated))
            mutated[pos] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        _assert_same(mutated, version)


def _classic_header(version: int) -> bytes:
    tx = b"\xff\xff" if version >= 3 else b""
    return tx + struct.pack(">hi", 1, 100)


HOSTILE_CLASSIC = [
    struct.pack(">i", 2**31 - 1),  # topic count far beyond the frame
    struct.pack(">i", -1),  # null topic array
    struct.pack(">i", -7),
    struct.pack(">ih", 1, -1),  # null topic name
    struct.pack(">ih", 1, -3),
    struct.pack(">ih", 1, 5) + b"ab",  # name longer than the frame
    struct.pack(">ih", 1, 2) + b"\xff\xfe" + struct.pack(">i", 0),  # invalid UTF-8
    struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, -2),  # negative records length
    struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, 2**31 - 1),  # records past the end
    struct.pack(">ih", 1, 1) + b"t" + struct.pack(">iii", 1, 0, -1),  # null records: valid
    struct.pack(">ih", 1, 1) + b"t" + struct.pack(">ii", 2**30, 0),  # partition count too big
]

HOSTILE_COMPACT = [
    b"\xff\xff\xff\xff\x0f",  # topic count 2**32-2: exceeds the bytes left
    b"\xff\xff\xff\xff\x1f",  # varint beyond 32 bits
    b"\x80\x80\x80\x80\x80\x01",  # varint longer than 5 bytes
    b"\x00",  # null topic array
    b"\x02\x00",  # null topic name
    b"\x02\x02t\x02\x00\x00\x00\x00\x00\x00\x00",  # null records, then empty tags: valid
    b"\x02\x02t\x02\x00\x00\x00\x00\x05ab\x00\x00\x00",  # records past the end
    b"\x02\x02t\x01\x05\x00",  # tagged section claims 5 fields in 2 bytes
    b"\x02\x02t\x01\x01\x07\x09\x00",  # tagged field size past the frame
    b"\x02\x02t\x01\x01\x07\x01z\x00",  # unknown tag skipped: valid
    b"\x02\x02t\x01\x00\x01\x00\x01",  # tag count 1 at the end, nothing after
]


@pytest.mark.parametrize("version", [v for v in VERSIONS if v < 9])
@pytest.mark.parametrize("tail", HOSTILE_CLASSIC)
def test_hostile_classic_bodies(version: int, tail: bytes) -> None:
    _assert_same(_classic_header(version) + tail, version)


@pytest.mark.parametrize("tail", HOSTILE_COMPACT)
def test_hostile_compact_bodies(tail: bytes) -> None:
    _assert_same(b"\x00" + struct.pack(">hi", 1, 100) + tail, 9)
    _assert_same(b"\x03tx" + struct.pack(">hi", 1, 100) + tail, 9)


def test_valid_hostile_lookalikes_really_decode() -> None:
    """The cases marked valid above are accepted by both paths (so the suite is not
    comparing two failures only)."""
    assert wire.decode_produce(bytearray(_classic_header(5) + HOSTILE_CLASSIC[9]), 0, 5)[3] == [("t", [(0, None)])]
    decoded = wire.decode_produce(bytearray(b"\x00" + struct.pack(">hi", 1, 100) + HOSTILE_COMPACT[9]), 0, 9)
    assert decoded == (None, 1, 100, [("t", [])])


def test_versions_outside_the_declaration_are_refused() -> None:
    with pytest.raises(ValueError):
        wire.decode_produce(bytearray(10), 0, 10)
    with pytest.raises(ValueError):
        wire.decode_produce(bytearray(10), 11, 3)


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_buffer_kinds(kind) -> None:
    raw = SPEC.encode_request(REQUESTS[0], 7)
    decoded = wire.decode_produce(kind(raw), 0, 7)
    assert decoded[3][0][1][0][1] == _batch(700)


# ---------------------------------------------------------------- response encoder

RESPONSES = [
    {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": 0, "base_offset": 123456789012, "log_append_time_ms": -1, "log_start_offset": 0}
                ],
            }
        ],
        "throttle_time_ms": 0,
    },
    {
        "responses": [
            {
                "name": "tópico",
                "partition_responses": [
                    {"index": 1, "error_code": 6, "base_offset": -1},
                    {
                        "index": 2,
                        "error_code": 87,
                        "base_offset": -1,
                        "log_append_time_ms": 1700000000000,
                        "log_start_offset": 17,
                        "record_errors": [
                            {"batch_index": 3, "batch_index_error_message": "bad"},
                            {"batch_index": 4},
                        ],
                        "error_message": "invalid record",
                    },
                ],
            },
            {"name": "empty", "partition_responses": []},
        ],
        "throttle_time_ms": 250,
    },
    {"responses": []},
    # v10+ (KIP-951): a partition's current leader and the leaders' endpoints, tagged;
    # v13+ names topics by id.
    {
        "responses": [
            {
                "name": "moved",
                "topic_id": uuid.UUID("3f2a6c1e-8d4b-4e0a-9c7b-5a1d2e3f4a5b"),
                "partition_responses": [
                    {"index": 0, "error_code": 6, "base_offset": -1,
                     "current_leader": {"leader_id": 2, "leader_epoch": 17}},
                    {"index": 1, "error_code": 6, "base_offset": -1, "current_leader": None},
                    {"index": 2, "error_code": 0, "base_offset": 5},
                ],
            }
        ],
        "throttle_time_ms": 3,
        "node_endpoints": [
            {"node_id": 2, "host": "broker-2.example", "port": 9093, "rack": "r1"},
            {"node_id": 3, "host": "b3", "port": 1},
        ],
    },
    {
        "responses": [{"name": "t", "topic_id": uuid.UUID(int=7), "partition_responses": [
            {"index": 0, "error_code": 0, "base_offset": 1, "current_leader": {}}]}],
        "node_endpoints": [],
    },
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("response_index", range(len(RESPONSES)))
@pytest.mark.parametrize("correlation_id", [0, 7, -2, 2**31 - 1])
def test_response_bytes_equal_the_generic_encoder(version: int, response_index: int, correlation_id: int) -> None:
    body = RESPONSES[response_index]
    generic = b"".join(encode_response(0, version, correlation_id, body))
    assert wire.encode_produce_response(version, correlation_id, body) == generic


def test_large_responses_grow_the_buffer() -> None:
    body = {
        "responses": [
            {"name": f"topic-{i}", "partition_responses": [{"index": p, "error_code": 0, "base_offset": p} for p in range(50)]}
            for i in range(20)
        ]
    }
    for version in VERSIONS:
        assert wire.encode_produce_response(version, 1, body) == b"".join(encode_response(0, version, 1, body))


def test_response_values_out_of_range_are_refused() -> None:
    bad = {"responses": [{"name": "t", "partition_responses": [{"index": 2**31, "error_code": 0, "base_offset": 0}]}]}
    with pytest.raises((ValueError, OverflowError)):
        wire.encode_produce_response(7, 1, bad)
    with pytest.raises(ValueError):
        wire.encode_produce_response(14, 1, RESPONSES[0])


# ---------------------------------------------------------------- request header

from pykfk.protocol.framing import decode_request_header

HEADERS = [
    struct.pack(">hhih", 0, 7, 1, 3) + b"abc",
    struct.pack(">hhih", 0, 9, 1, 3) + b"abc" + b"\x00",
    struct.pack(">hhih", 0, 9, 1, -1) + b"\x01\x05\x02zz",  # one unknown tagged field
    struct.pack(">hhih", 0, 3, -4, -1),
    struct.pack(">hhih", 0, 3, 4, -2),  # negative length
    struct.pack(">hhih", 0, 3, 4, 9) + b"short",  # past the frame
    struct.pack(">hhih", 0, 3, 4, 2) + b"\xc3\x28",  # invalid UTF-8
    struct.pack(">hhih", 0, 9, 1, 0) + b"\x02\x00\x01",  # tagged field past the frame
    struct.pack(">hhih", 0, 9, 1, 0) + b"\x80\x80\x80\x80\x80",  # over-long varint
    struct.pack(">hhih", 0, 9, 1, 0),  # tagged section missing
    b"\x00\x00\x00",
]


def _header_outcome(frame: bytes, flexible: bool):
    try:
        header, offset = decode_request_header(bytearray(frame))
        return "ok", (header.client_id, offset)
    except ProtocolError:
        return "error", None


def _fast_header_outcome(frame: bytes, flexible: bool):
    try:
        return "ok", wire.decode_request_header(bytearray(frame), flexible)
    except ProtocolError:
        return "error", None


@pytest.mark.parametrize("frame", HEADERS)
def test_request_header_as_framing(frame: bytes) -> None:
    flexible = len(frame) >= 4 and struct.unpack(">h", frame[2:4])[0] >= 9
    assert _fast_header_outcome(frame, flexible) == _header_outcome(frame, flexible)
    rng = random.Random(len(frame))
    for cut in range(len(frame) + 1):
        assert _fast_header_outcome(frame[:cut], flexible) == _header_outcome(frame[:cut], flexible)
    for _ in range(200 if len(frame) >= 10 else 0):
        mutated = bytearray(frame + b"body")
        pos = rng.randrange(8, len(mutated))
        mutated[pos] = rng.randrange(256)
        assert _fast_header_outcome(bytes(mutated), flexible) == _header_outcome(bytes(mutated), flexible)
