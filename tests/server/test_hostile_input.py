"""Hostile input against a broker process: each case must close only its own connection
or answer with a Kafka error, never crash the broker or grow its memory without bound.
After each case a well-behaved client still works."""

from __future__ import annotations

import random
import socket
import struct
import time

import pytest

from pykfk._core.records import build_batch
from pykfk.errors import ErrorCode
from tests.server.conftest import RawClient
from tests.server.test_handlers import API_VERSIONS, METADATA, PRODUCE, create_topic, fetch, produce

# Growth allowed over the whole module: generous for allocator noise, far below the
# hundreds of MiB the hostile frames announce.
RSS_GROWTH_LIMIT_KB = 64 * 1024


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    from pykfk.testing import BrokerProcess

    broker = BrokerProcess(str(tmp_path_factory.mktemp("hostile") / "data"), {"socket.request.max.bytes": 200 * 1024 * 1024})
    broker.start()
    client = RawClient(broker.host, broker.port)
    create_topic(client, "victim", 1)
    assert produce(client, "victim", 0, build_batch([(b"k", b"stored", 1, [])])).base_offset == 0
    client.close()
    broker.baseline_rss_kb = broker.rss_kb()
    yield broker
    assert broker.stop() == 0


@pytest.fixture(autouse=True)
def still_healthy(target):
    """After every case: the broker serves a normal client and stored data is intact."""
    yield
    assert target.is_running(), target.log_tail()
    client = RawClient(target.host, target.port)
    try:
        assert client.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}).error_code == 0
        part = fetch(client, "victim", 0, 0)
        assert part.error_code == 0 and b"stored" in bytes(part.records)
    finally:
        client.close()
    assert target.rss_kb() - target.baseline_rss_kb < RSS_GROWTH_LIMIT_KB


def connect(target) -> RawClient:
    return RawClient(target.host, target.port)


def test_two_gib_length_prefix_closes_before_allocating(target):
    client = connect(target)
    client.sock.sendall(struct.pack(">I", 0x7FFFFFFF) + b"\x00" * 16)
    assert client.is_closed_by_peer()
    assert "socket.request.max.bytes" in target.log_text()


def test_negative_length_prefix(target):
    client = connect(target)
    client.sock.sendall(struct.pack(">i", -5) + b"x" * 8)
    assert client.is_closed_by_peer()


def test_large_announced_frame_holds_only_what_arrives(target):
    # 150 MiB announced (allowed by this broker's limit) but only 1 MiB sent: memory must
    # follow the bytes received, not the announcement.
    clients = []
    for _ in range(3):
        client = connect(target)
        client.sock.sendall(struct.pack(">i", 150 * 1024 * 1024) + struct.pack(">hhi", PRODUCE, 7, 1) + bytes(1 << 20))
        clients.append(client)
    time.sleep(0.5)  # time to read what was sent; waiting longer only tightens the bound
    assert target.rss_kb() - target.baseline_rss_kb < RSS_GROWTH_LIMIT_KB
    for client in clients:
        client.close()


@pytest.mark.parametrize("seed", range(8))
def test_random_bytes(target, seed):
    rng = random.Random(seed)
    client = connect(target)
    try:
        client.sock.sendall(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4096))))
        client.sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass  # the broker may already have closed it
    assert client.is_closed_by_peer()


def test_truncated_frame_then_disconnect(target):
    client = connect(target)
    client.sock.sendall(struct.pack(">i", 100) + struct.pack(">hhi", METADATA, 5, 1))
    client.close()


def test_random_garbage_after_a_valid_header(target):
    rng = random.Random(42)
    for api_key, version in [(PRODUCE, 7), (METADATA, 5), (1, 11), (19, 4), (32, 2)]:
        client = connect(target)
        header = struct.pack(">hhih", api_key, version, 1, 3) + b"abc"
        body = bytes(rng.getrandbits(8) for _ in range(64))
        client.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        # Either a decode error (connection closed) or, if the bytes happen to decode, an
        # answer; never a broker crash (checked by the autouse fixture).
        client.sock.settimeout(5)
        try:
            client.sock.recv(65536)
        except OSError:
            pass
        client.close()


def test_array_count_lies(target):
    # Metadata v5 whose topic array claims 2**31-1 entries in a 20-byte frame.
    client = connect(target)
    header = struct.pack(">hhih", METADATA, 5, 1, -1)
    body = struct.pack(">i", 0x7FFFFFFF) + b"\x00" * 16
    client.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
    assert client.is_closed_by_peer()


def test_unknown_api_key_and_unsupported_version(target):
    for api_key, version in [(999, 0), (-1, 0), (PRODUCE, 42), (METADATA, -3)]:
        client = connect(target)
        client.sock.sendall(struct.pack(">ihhih", 10, api_key, version, 9, -1))
        assert client.is_closed_by_peer()


def _batch_with(offset: int, fmt: str, value: int) -> bytes:
    batch = bytearray(build_batch([(b"k", b"v", 1, []), (b"k2", b"v2", 2, [])]))
    struct.pack_into(fmt, batch, offset, value)
    return bytes(batch)


@pytest.mark.parametrize(
    "records",
    [
        pytest.param(_batch_with(8, ">i", 10_000), id="batch-length-beyond-data"),
        pytest.param(_batch_with(8, ">i", 5), id="batch-length-too-small"),
        pytest.param(_batch_with(57, ">i", 0x7FFFFFFF), id="huge-record-count"),
        pytest.param(_batch_with(57, ">i", -1), id="negative-record-count"),
        pytest.param(_batch_with(17, ">I", 0xDEADBEEF), id="bad-crc"),
        pytest.param(_batch_with(16, ">b", 7), id="unknown-magic"),
        pytest.param(build_batch([(b"k", b"v", 1, [])])[:30], id="truncated-batch"),
        pytest.param(b"\x00" * 70, id="zeros"),
    ],
)
def test_bad_batches_get_kafka_errors(target, records):
    client = connect(target)
    part = produce(client, "victim", 0, records)
    assert part.error_code in (ErrorCode.CORRUPT_MESSAGE, ErrorCode.INVALID_RECORD)
    client.close()


def test_many_concurrent_connections(target):
    clients = [connect(target) for _ in range(200)]
    for client in clients:
        client.send(API_VERSIONS, 0, {})
    for client in clients:
        assert client.recv(API_VERSIONS, 0)[1].error_code == 0
        client.close()


def test_flood_of_pipelined_requests_without_reading(target):
    # A client that sends many requests and never reads: the broker pauses reading
    # instead of queueing responses without bound.
    client = connect(target)
    frame = bytes.fromhex("0000000c") + struct.pack(">hhih", API_VERSIONS, 0, 1, 2) + b"ab"
    client.sock.settimeout(2)
    sent = 0
    try:
        for _ in range(20000):
            client.sock.sendall(frame * 100)
            sent += 100
    except (TimeoutError, OSError):
        pass
    assert target.rss_kb() - target.baseline_rss_kb < RSS_GROWTH_LIMIT_KB
    client.close()
