"""The compiled request lane (pykfk._core.request_lane) on a real listener: pipelined
requests answered in order across APIs answered at once and later, the answers of one
read in one send, answers ready in one loop turn in one send, hostile frames closing or
answered as the Python dispatcher does."""

from __future__ import annotations

import os
import socket
import struct
import time

import pytest

from pykfk._core.records import build_batch
from pykfk.errors import ErrorCode
from pykfk.metrics.stats import VERSION_SLOTS
from pykfk.protocol import framing
from pykfk.testing import RawClient

from .test_handlers import API_VERSIONS, FETCH, METADATA, PRODUCE, create_topic, fetch_request

TOPIC = "lane"


class _CountingSocket(socket.socket):
    """The connection's own duplicate of its socket, counting the sends made on it."""

    sends = 0

    def send(self, data, flags=0):  # type: ignore[no-untyped-def]
        type(self).sends += 1
        return super().send(data, flags)

    def sendmsg(self, *args):  # type: ignore[no-untyped-def]
        type(self).sends += 1
        return super().sendmsg(*args)


def _count_sends(broker) -> type[_CountingSocket]:
    """Put a counting socket under the broker's only client connection."""
    counter = type("Counter", (_CountingSocket,), {"sends": 0})

    async def swap() -> None:
        (conn,) = broker.broker.server.connections
        old = conn._sock
        new = counter(fileno=os.dup(old.fileno()))
        new.setblocking(False)
        conn._sock = new
        old.close()

    broker.call(swap)
    return counter


def _produce_body(partition: int, value: bytes, acks: int = 1) -> dict:
    batch = build_batch([(None, value, 1000, [])])
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]}


def _frame(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    return framing.encode_request(api_key, version, correlation_id, "lane", body)


def _answers(raw: RawClient, expected: list[tuple[int, int, int]]) -> list[object]:
    """Read one answer per (api_key, version, correlation_id), in that order."""
    out = []
    for api_key, version, correlation_id in expected:
        got, body = raw.recv(api_key, version)
        assert got == correlation_id
        out.append(body)
    return out


@pytest.fixture
def topic(raw):
    assert create_topic(raw, TOPIC, partitions=2)[0] == 0
    return TOPIC


def test_the_answers_of_one_read_leave_in_one_send(broker, raw, topic):
    counter = _count_sends(broker)
    frames = [_frame(PRODUCE, 7, 100 + i, _produce_body(0, b"v%d" % i)) for i in range(10)]
    frames += [_frame(FETCH, 11, 110 + i, fetch_request(TOPIC, 0, i)) for i in range(10)]
    raw.sock.sendall(b"".join(frames))
    answers = _answers(raw, [(PRODUCE, 7, 100 + i) for i in range(10)] + [(FETCH, 11, 110 + i) for i in range(10)])
    offsets = [a.responses[0].partition_responses[0].base_offset for a in answers[:10]]
    assert offsets == list(range(10))
    for i, answer in enumerate(answers[10:]):
        part = answer.responses[0].partitions[0]
        assert part.error_code == 0 and b"v%d" % i in bytes(part.records)
    assert counter.sends == 1


def test_pipelined_requests_are_answered_in_order_across_fast_and_slow_apis(broker, raw, topic):
    """A long-poll Fetch that waits for data sits between requests answered at once (an
    acks=all Produce among them); a Produce on another connection gives it its data.
    Every answer comes back in request order: the waiting fetch holds back those behind
    it, not the one before."""
    counter = _count_sends(broker)
    frames = [
        _frame(API_VERSIONS, 3, 1, {"client_software_name": "t", "client_software_version": "1"}),
        _frame(FETCH, 11, 2, fetch_request(TOPIC, 1, 0, max_wait_ms=5000, min_bytes=1)),  # waits
        _frame(METADATA, 9, 3, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False,
                                "include_cluster_authorized_operations": False,
                                "include_topic_authorized_operations": False}),
        _frame(PRODUCE, 7, 4, _produce_body(0, b"first", acks=-1)),
        _frame(FETCH, 11, 5, fetch_request(TOPIC, 0, 0)),
    ]
    raw.sock.sendall(b"".join(frames))
    (versions,) = _answers(raw, [(API_VERSIONS, 3, 1)])
    assert versions.error_code == 0
    time.sleep(0.2)
    raw.sock.settimeout(0.2)
    with pytest.raises(TimeoutError):
        raw.sock.recv(1)  # nothing overtakes the waiting fetch
    raw.sock.settimeout(10)
    assert counter.sends == 1
    started = time.monotonic()
    other = raw.connect()
    assert other.call(PRODUCE, 7, _produce_body(1, b"wakes the fetch")).responses[0].partition_responses[0].error_code == 0
    waited, metadata, produced, fetched = _answers(raw, [(FETCH, 11, 2), (METADATA, 9, 3), (PRODUCE, 7, 4),
                                                         (FETCH, 11, 5)])
    assert time.monotonic() - started < 4  # woken by the produce, not by its max_wait_ms
    assert b"wakes the fetch" in bytes(waited.responses[0].partitions[0].records)
    assert metadata.topics[0].name == TOPIC
    assert produced.responses[0].partition_responses[0].error_code == 0
    assert b"first" in bytes(fetched.responses[0].partitions[0].records)
    assert counter.sends == 2  # the rest in one send, once the fetch is answered


def test_answers_ready_in_one_loop_turn_leave_in_one_send(broker, raw, topic):
    """Five long-poll fetches parked on an empty partition wake on the same append, in
    one turn of the event loop: their answers leave together."""
    counter = _count_sends(broker)
    frames = [_frame(FETCH, 11, 10 + i, fetch_request(TOPIC, 1, 0, max_wait_ms=5000)) for i in range(5)]
    raw.sock.sendall(b"".join(frames))
    time.sleep(0.2)  # every fetch parked
    assert counter.sends == 0
    other = raw.connect()
    batch = build_batch([(None, b"wake", 1000, [])])
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 1, "records": batch}]}]}
    assert other.call(PRODUCE, 7, body).responses[0].partition_responses[0].error_code == 0
    for answer in _answers(raw, [(FETCH, 11, 10 + i) for i in range(5)]):
        assert b"wake" in bytes(answer.responses[0].partitions[0].records)
    assert counter.sends == 1


def test_a_lone_request_is_answered_at_once(broker, raw, topic):
    """Two requests in two reads of one loop turn may share a send; one request alone
    never waits for another turn: many round trips, each well under a millisecond."""
    counter = _count_sends(broker)
    frame = _frame(API_VERSIONS, 3, 7, {"client_software_name": "t", "client_software_version": "1"})
    times = []
    for _ in range(200):
        started = time.perf_counter()
        raw.sock.sendall(frame)
        raw.recv_frame()
        times.append(time.perf_counter() - started)
    assert counter.sends == 200
    assert sorted(times)[100] < 0.005


def _raw_frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("bad", [
    struct.pack(">hhi", 12345, 0, 1) + b"\x00\x00",  # unknown api key
    struct.pack(">hhi", 200, 0, 1) + b"\x00\x00",  # beyond the lane's table
    struct.pack(">hhi", PRODUCE, 99, 1) + b"\x00\x00",  # unsupported version
    struct.pack(">hh", PRODUCE, 7) + b"\x00",  # truncated header
    struct.pack(">hhi", PRODUCE, 7, 1) + b"\x00\x04ab",  # client id longer than the frame
    struct.pack(">hhi", FETCH, 11, 1) + b"\x00\x00" + b"\x01\x02",  # body cut short
], ids=["unknown-key", "key-200", "bad-version", "truncated-header", "bad-client-id", "truncated-body"])
def test_a_hostile_frame_after_good_ones_closes_the_connection(broker, raw, topic, bad):
    good = _frame(API_VERSIONS, 3, 1, {"client_software_name": "t", "client_software_version": "1"})
    raw.sock.sendall(good + _raw_frame(bad) + good)
    raw.sock.settimeout(5)
    data = b""
    while True:
        try:
            chunk = raw.sock.recv(1 << 16)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    # At most the answer of the request before it; never one after it.
    assert data.count(struct.pack(">i", 1)) <= 1
    still = raw.connect()
    assert still.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0


def test_an_api_versions_of_an_unknown_version_is_answered_unsupported(broker, raw, topic):
    raw.sock.sendall(_raw_frame(struct.pack(">hhi", API_VERSIONS, 99, 5) + b"\x00\x00")
                     + _frame(API_VERSIONS, 3, 6, {"client_software_name": "t", "client_software_version": "1"}))
    got, body = raw.recv(API_VERSIONS, 0)
    assert got == 5 and body.error_code == ErrorCode.UNSUPPORTED_VERSION
    got, body = raw.recv(API_VERSIONS, 3)
    assert got == 6 and body.error_code == 0


def test_requests_are_counted_by_api_and_version(broker, raw, topic):
    stats = broker.broker.server.request_stats

    async def produce_count() -> int:
        return stats.counts[PRODUCE * VERSION_SLOTS + 7]

    before = broker.call(produce_count)
    raw.sock.sendall(b"".join(_frame(PRODUCE, 7, 20 + i, _produce_body(0, b"x")) for i in range(7)))
    _answers(raw, [(PRODUCE, 7, 20 + i) for i in range(7)])
    assert broker.call(produce_count) - before == 7
