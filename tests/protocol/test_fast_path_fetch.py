"""The compiled Fetch response encoder (pykfk._core.wire.encode_fetch_response) gives the
generic encoder's bytes and chunk layout on every version, or None for the bodies it
leaves to the generic encoder."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from pykfk._core import wire
from pykfk.protocol.framing import encode_response
from pykfk.protocol.types import INLINE_RECORDS_MAX, FileRegion, ProtocolError, Struct

FETCH = 1
VERSIONS = range(wire.FETCH_MIN_VERSION, wire.FETCH_MAX_VERSION + 1)


@pytest.fixture(scope="module")
def region_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("fetch") / "segment.log"
    path.write_bytes(os.urandom(64 * 1024))
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def _partition(index: int, records, *, error: int = 0, aborted=None) -> dict:
    return {"partition_index": index, "error_code": error, "high_watermark": 1000 + index,
            "last_stable_offset": 990 + index, "log_start_offset": index, "aborted_transactions": aborted,
            "preferred_read_replica": -1 if index % 2 else index, "records": records}


def _bodies(fd: int) -> list[dict]:
    topic_id = uuid.UUID("0123456789abcdef0123456789abcdef")
    return [
        {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []},
        {"throttle_time_ms": 5, "error_code": 0, "session_id": 77, "responses": [
            {"topic": "orders", "topic_id": topic_id, "partitions": [
                _partition(0, FileRegion(fd, 100, 3000)),
                _partition(1, b""),
                _partition(2, None, error=6),
                _partition(3, FileRegion(fd, 0, 0)),
                _partition(4, b"x" * 100, aborted=[{"producer_id": 9, "first_offset": 40},
                                                   {"producer_id": 2**62, "first_offset": -1}]),
                _partition(5, b"y" * INLINE_RECORDS_MAX, aborted=[]),
                _partition(6, memoryview(b"z" * (INLINE_RECORDS_MAX + 1))),
                _partition(7, bytearray(b"w" * 50)),
            ]},
            {"topic": "é-topic", "topic_id": uuid.uuid4(), "partitions": []},
        ]},
        {"throttle_time_ms": 0, "error_code": 71, "session_id": 0, "responses": []},
        {"throttle_time_ms": 0, "error_code": 0, "session_id": 3, "responses": [
            {"topic": f"t{t}", "topic_id": uuid.UUID(int=t + 1), "partitions": [
                _partition(p, FileRegion(fd, p * 200, 150)) for p in range(50)]} for t in range(20)]},
    ]


def _flat(chunks: list) -> bytes:
    return b"".join(os.pread(c.fd, c.size, c.position) if type(c) is FileRegion else bytes(c) for c in chunks)


def _layout(chunks: list) -> list:
    """Which chunks pass through (by identity) and where: the generic encoder's layout."""
    return [("region", c.position, c.size) if type(c) is FileRegion else
            ("buffer", len(memoryview(c).cast("B"))) for c in chunks]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("correlation_id", [0, 42, -3, 2**31 - 1])
def test_response_chunks_equal_the_generic_encoder(region_file, version: int, correlation_id: int) -> None:
    for body in _bodies(region_file):
        if version < 4:  # no aborted transactions before v4 (the generic encoder drops them too)
            body = _without_aborted(body)
        fast = wire.encode_fetch_response(version, correlation_id, body)
        generic = encode_response(FETCH, version, correlation_id, body)
        assert fast is not None
        assert _flat(fast) == _flat(generic)
        assert _layout(fast) == _layout(generic)


def _without_aborted(body: dict) -> dict:
    return {**body, "responses": [{**t, "partitions": [{**p, "aborted_transactions": None} for p in t["partitions"]]}
                                  for t in body["responses"]]}


def test_random_bodies_agree_with_the_generic_encoder(region_file) -> None:
    rng = random.Random(7)
    for _ in range(300):
        version = rng.choice(list(VERSIONS))
        partitions = []
        for index in range(rng.randrange(0, 6)):
            kind = rng.randrange(4)
            records = [None, b"", FileRegion(region_file, rng.randrange(1000), rng.randrange(5000)),
                       bytes(rng.randrange(40))][kind]
            aborted = None if version < 4 or rng.random() < 0.5 else [
                {"producer_id": rng.randrange(-1, 2**40), "first_offset": rng.randrange(2**40)}
                for _ in range(rng.randrange(3))]
            partitions.append({**_partition(rng.randrange(-1, 2**31 - 1), records, aborted=aborted),
                               "high_watermark": rng.randrange(-1, 2**63 - 1)})
        body = {"throttle_time_ms": rng.randrange(2**31), "error_code": rng.randrange(-1, 120),
                "session_id": rng.randrange(-(2**31), 2**31), "responses": [
                    {"topic": "t" * rng.randrange(1, 300), "topic_id": uuid.UUID(int=rng.getrandbits(128)),
                     "partitions": partitions}]}
        assert _flat(wire.encode_fetch_response(version, 1, body)) == _flat(encode_response(FETCH, version, 1, body))


@pytest.mark.parametrize("field", ["diverging_epoch", "current_leader", "snapshot_id"])
def test_tagged_partition_fields_are_left_to_the_generic_encoder(field: str) -> None:
    body = {"responses": [{"topic": "t", "topic_id": uuid.UUID(int=1),
                           "partitions": [{**_partition(0, b""), field: {"epoch": 3, "end_offset": 5}}]}]}
    assert wire.encode_fetch_response(12, 1, body) is None
    # Before v12 the field does not exist: encoded (and dropped) as the generic encoder does.
    assert _flat(wire.encode_fetch_response(11, 1, body)) == _flat(encode_response(FETCH, 11, 1, body))


def test_node_endpoints_and_chunk_lists_are_left_to_the_generic_encoder() -> None:
    endpoints = {"responses": [], "node_endpoints": [{"node_id": 1, "host": "h", "port": 1, "rack": None}]}
    assert wire.encode_fetch_response(16, 1, endpoints) is None
    listed = {"responses": [{"topic": "t", "topic_id": uuid.UUID(int=1), "partitions": [_partition(0, [b"a", b"b"])]}]}
    assert wire.encode_fetch_response(11, 1, listed) is None


def test_out_of_range_values_and_versions_are_refused() -> None:
    with pytest.raises(ValueError):
        wire.encode_fetch_response(wire.FETCH_MAX_VERSION + 1, 1, {"responses": []})
    with pytest.raises(ValueError):
        wire.encode_fetch_response(-1, 1, {"responses": []})
    for field, value in [("partition_index", 2**31), ("error_code", 2**15), ("high_watermark", 2**63)]:
        body = {"responses": [{"topic": "t", "partitions": [{**_partition(0, b""), field: value}]}]}
        with pytest.raises((OverflowError, ValueError)):
            wire.encode_fetch_response(11, 1, body)
    with pytest.raises(TypeError):
        wire.encode_fetch_response(11, 1, {"responses": [{"topic": "t", "partitions": [_partition(0, 5)]}]})


# -- requests --------------------------------------------------------------------------

REQUESTS = [
    {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 1,
     "session_id": 0, "session_epoch": -1, "rack_id": "rack-é", "cluster_id": None,
     "forgotten_topics_data": [],
     "topics": [{"topic": "orders", "topic_id": uuid.UUID(int=99), "partitions": [
         {"partition": p, "current_leader_epoch": p - 1, "fetch_offset": 2**40 + p, "last_fetched_epoch": 3,
          "log_start_offset": -1, "partition_max_bytes": 1048576,
          # tagged (v17+, v18+): set on some partitions only
          "replica_directory_id": uuid.UUID(int=p) if p % 2 else uuid.UUID(int=0),
          "high_watermark": 2**40 + p if p % 3 else 2**63 - 1} for p in range(8)]},
         {"topic": "x" * 300, "topic_id": uuid.UUID(int=2**128 - 1), "partitions": []}]},
    {"replica_id": 3, "replica_state": {"replica_id": 3, "replica_epoch": 77}, "max_wait_ms": 0, "min_bytes": 0,
     "max_bytes": 0, "isolation_level": 0, "session_id": 12345, "session_epoch": 9, "rack_id": "",
     "cluster_id": "cluster-1",
     "forgotten_topics_data": [{"topic": "gone", "topic_id": uuid.UUID(int=5), "partitions": [1, 2, 2**31 - 1]}],
     "topics": []},
]


def _request_bytes(body: dict, version: int) -> bytes:
    from pykfk.protocol.messages.fetch import SPEC

    return SPEC.encode_request(body, version)


def _decode_outcome(fn, raw: bytes, version: int):
    try:
        return "ok", fn(memoryview(bytearray(raw)), version)
    except ProtocolError:
        return "error", None


def _generic_request(view: memoryview, version: int):
    from pykfk.protocol.messages.fetch import SPEC

    return SPEC.decode_request(view, 0, version)


def _fast_request(view: memoryview, version: int):
    return wire.decode_fetch(view, 0, version)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("request_index", range(len(REQUESTS)))
def test_requests_decode_as_the_generic_decoder(version: int, request_index: int) -> None:
    raw = _request_bytes(REQUESTS[request_index], version)
    fast = wire.decode_fetch(raw, 0, version)
    assert fast == _generic_request(memoryview(raw), version)
    assert type(fast) is Struct and all(type(t) is Struct for t in fast.topics)
    assert fast.topics == [] or all(type(p) is Struct for t in fast.topics for p in t.partitions)
    assert wire.decode_fetch(b"HDR" + raw, 3, version) == fast


@pytest.mark.parametrize("version", VERSIONS)
def test_every_truncation_and_trailing_byte_fails_like_the_generic_decoder(version: int) -> None:
    for body in REQUESTS:
        raw = _request_bytes(body, version)
        for cut in range(len(raw)):
            assert _decode_outcome(_fast_request, raw[:cut], version) == ("error", None)
            assert _decode_outcome(_generic_request, raw[:cut], version) == ("error", None)
        with pytest.raises(ProtocolError):
            wire.decode_fetch(raw + b"\x00", 0, version)


@pytest.mark.parametrize("version", VERSIONS)
def test_random_mutations_agree_with_the_generic_decoder(version: int) -> None:
    rng = random.Random(version)
    for body in REQUESTS:
        raw = _request_bytes(body, version)
        for _ in range(600):
            mutated = bytearray(raw)
            for _ in range(rng.randint(1, 3)):
                mutated[rng.randrange(len(mutated))] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)))
            assert _decode_outcome(_fast_request, mutated, version) == \
                _decode_outcome(_generic_request, mutated, version)


def test_unknown_and_undeclared_tags_are_skipped_and_oversized_tags_refused() -> None:
    raw = _request_bytes(REQUESTS[0], 12)
    # v12 ends with the request's tagged section (0 fields): replace it with a replica
    # state (tag 1, only declared from v15: skipped) and an unknown tag 9.
    tail = bytes([2, 1, 13]) + bytes(13) + bytes([9, 2, 0xAA, 0xBB])
    mutated = raw[:-1] + tail
    assert wire.decode_fetch(mutated, 0, 12) == _generic_request(memoryview(mutated), 12)
    assert wire.decode_fetch(mutated, 0, 12).replica_state is None
    with pytest.raises(ProtocolError):
        wire.decode_fetch(raw[:-1] + bytes([1, 0, 50, 1]), 0, 12)  # cluster_id claims 50 bytes
    with pytest.raises(ValueError):
        wire.decode_fetch(raw, 0, wire.FETCH_REQUEST_MAX_VERSION + 1)
