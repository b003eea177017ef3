"""The broker's CPU per small Produce request: one record per request, acks=1 (the paper's
"producer batch 1" run), frame bytes in, response bytes out.

    python -m pytest bench/bench_produce_request.py                       # figures + table
    python -m pytest bench/bench_produce_request.py --benchmark-disable   # one quick pass (CI)

The request is what confluent-kafka sends at batch.num.messages=1, linger.ms=0: Produce
v7, one topic, one partition, one batch of one 200-byte record. It goes through the real
path of a standalone broker started in this process (Broker on uvloop, a topic on a
temporary log dir): ``Connection.get_buffer``/``buffer_updated`` as the event loop calls
them after a read, frame cutting, ``Dispatcher.prepare``, the Produce handler, Log.append
to the segment file, the response encoder and ``send`` on the connection's socket. The
socket is one end of a socketpair (no TCP, no event loop read turn); the bench reads the
responses from the other end between requests.

Candidates: a plain producer (producer id -1) and an idempotent one (sequences running on,
so every append passes the sequence checks and updates the producer state). Figures are
microseconds per request, best-of-N rounds with the median beside it (the machine is
shared), each round `calls` requests.
"""

from __future__ import annotations

import asyncio
import socket
import statistics
import struct
import time
from typing import Any

import pytest

from pykfk._core.records import build_batch
from pykfk.protocol import framing

PRODUCE = 0
VERSION = 7
TOPIC = "bench"
RECORD_VALUE = b"v" * 200
PRODUCER_ID = 4242
_SIZE = struct.Struct(">i")


def _frame(correlation_id: int, batch: bytes) -> bytes:
    """A whole Produce v7 request frame (size prefix included) carrying ``batch``."""
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 30000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return framing.encode_request(PRODUCE, VERSION, correlation_id, "rdkafka", body)


def _frames(count: int, idempotent: bool) -> list[bytes]:
    """``count`` requests as a producer sends them; an idempotent producer's sequences
    run on from 0 (the list is sent once, in order)."""
    out = []
    for i in range(count):
        record = [(None, RECORD_VALUE, 1_700_000_000_000 + i, [])]
        if idempotent:
            batch = build_batch(record, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=i)
        else:
            batch = build_batch(record)
        out.append(_frame(i, batch))
    return out


class _Transport:
    """What Connection asks of its transport: the socket (it writes on a duplicate of its
    fd) and reading flow control, which this bench never needs."""

    def __init__(self, sock: socket.socket):
        self._sock = sock

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 1), "socket": self._sock}.get(name, default)

    def pause_reading(self) -> None:
        raise AssertionError("reading paused during the bench")

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def abort(self) -> None:
        raise AssertionError("the connection was aborted")


class _Harness:
    """A started broker with a topic, one Connection fed by hand, and the peer socket."""

    def __init__(self, log_dir: str):
        import uvloop

        from pykfk.broker import Broker
        from pykfk.config import BrokerConfig

        self.loop = uvloop.new_event_loop()
        self.broker = Broker(BrokerConfig({"log.dirs": log_dir, "listeners": "PLAINTEXT://127.0.0.1:0"}))
        self.run(self.broker.start())
        self.run(self.broker.topics.create_topic(TOPIC, 1, 1, {}))
        self.ours, self.peer = socket.socketpair()
        self.peer.setblocking(False)
        self.conn: Any = None

        async def connect() -> None:
            from pykfk.server.connection import Connection

            self.conn = Connection(self.broker.server)
            self.conn.connection_made(_Transport(self.ours))
            await asyncio.sleep(0)  # the writer task starts and waits, idle

        self.run(connect())

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def send_all(self, frames: list[bytes]) -> None:
        """Each frame as one socket read, as the event loop would deliver it; the
        responses are read from the peer socket (and dropped) every 64 requests, well
        before they could fill the socket buffer."""
        conn = self.conn
        recv_into = self.peer.recv_into
        sink = bytearray(1 << 20)
        for i, frame in enumerate(frames):
            n = len(frame)
            conn.get_buffer(n)[:n] = frame
            conn.buffer_updated(n)
            if i & 63 == 63:
                try:
                    recv_into(sink)
                except BlockingIOError:
                    pass

    def send_kept(self, frames: list[bytes]) -> bytes:
        """``send_all`` keeping the response bytes (for checks, not timed)."""
        out = bytearray()
        for frame in frames:
            n = len(frame)
            self.conn.get_buffer(n)[:n] = frame
            self.conn.buffer_updated(n)
            out += self.drain()
        return bytes(out)

    def drain(self) -> bytes:
        out = bytearray()
        while True:
            try:
                chunk = self.peer.recv(1 << 20)
            except BlockingIOError:
                return bytes(out)
            out += chunk

    def close(self) -> None:
        self.conn.connection_lost(None)
        self.run(self.broker.stop())
        self.ours.close()
        self.peer.close()
        self.loop.close()


def _timed_rounds(harness: _Harness, frames: list[bytes], first: int, calls: int,
                  rounds: int) -> tuple[list[float], int]:
    """``rounds`` rounds of ``calls`` requests from ``frames[first:]``, each timed to its
    last response and drained after: seconds per request of each round, and the next frame."""
    times, next_frame = [], first
    for _ in range(rounds):
        batch = frames[next_frame : next_frame + calls]
        next_frame += calls
        start = time.perf_counter()
        harness.send_all(batch)
        times.append((time.perf_counter() - start) / calls)
        harness.drain()
    return times, next_frame


def _check_responses(data: bytes, first_offset: int, count: int) -> None:
    """The responses as a client reads them: every partition answered without an error,
    offsets running on from ``first_offset``."""
    pos, expected = 0, first_offset
    while pos < len(data):
        (size,) = _SIZE.unpack_from(data, pos)
        _cid, body = framing.decode_response(PRODUCE, VERSION, data[pos + 4 : pos + 4 + size])
        part = body.responses[0].partition_responses[0]
        assert part.error_code == 0, part
        assert part.base_offset == expected, (part.base_offset, expected)
        expected += 1
        pos += 4 + size
    assert expected == first_offset + count


@pytest.mark.benchmark(group="produce-request")
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_produce_request(benchmark, report, tmp_path, idempotent) -> None:  # type: ignore[no-untyped-def]
    disabled = getattr(benchmark, "disabled", False)
    calls, rounds = (200, 2) if disabled else (5000, 15)
    frames = _frames(calls * (rounds + 2) + 1000, idempotent)
    harness = _Harness(str(tmp_path / "data"))
    try:
        # Warm-up, and a check that the responses are what a client expects.
        _check_responses(harness.send_kept(frames[:1000]), 0, 1000)
        times, next_frame = _timed_rounds(harness, frames, 1000, calls, rounds)
        plog = harness.broker.get_log(TOPIC, 0)
        assert plog.log_end_offset == next_frame
        if idempotent:
            assert plog.producer_state.producers[PRODUCER_ID].last_seq == next_frame - 1
        best, median = min(times) * 1e6, statistics.median(times) * 1e6
        benchmark.extra_info["us_per_request"] = round(best, 3)
        benchmark.extra_info["us_per_request_median"] = round(median, 3)
        report(f"Produce v7, 1 record of {len(RECORD_VALUE)} B, acks=1, "
               f"{'idempotent' if idempotent else 'plain'}: {best:.2f} us/request best-of-{rounds}, "
               f"{median:.2f} us median")

        # pytest-benchmark's own table: a round of `calls` requests.
        remaining = iter(range(next_frame, len(frames) - calls + 1, calls))

        def one_round() -> None:
            k = next(remaining, None)
            if k is None:
                return
            harness.send_all(frames[k : k + calls])
            harness.drain()

        benchmark.pedantic(one_round, rounds=1, iterations=1)
    finally:
        harness.close()


def _spread_frames(count: int, topic: str, partitions: int) -> list[bytes]:
    """``count`` Produce v9 requests (what librdkafka sends) at acks=all, each carrying one
    batch of one 1 KiB record for every one of ``partitions`` partitions: the shape of the
    latency workload's requests (several partitions per request, one write each)."""
    out = []
    for i in range(count):
        batch = build_batch([(b"k", bytes(1024), 1_700_000_000_000 + i, [])])
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": p, "records": batch} for p in range(partitions)]}]}
        out.append(framing.encode_request(PRODUCE, 9, i, "rdkafka", body))
    return out


@pytest.mark.benchmark(group="produce-request")
def test_produce_request_spread(benchmark, report, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Produce v9, acks=all, a 1 KiB batch for each of 8 partitions in every request."""
    disabled = getattr(benchmark, "disabled", False)
    calls, rounds = (100, 2) if disabled else (1000, 15)
    partitions = 8
    frames = _spread_frames(calls * (rounds + 1) + 200, "spread", partitions)
    harness = _Harness(str(tmp_path / "data"))
    try:
        harness.run(harness.broker.topics.create_topic("spread", partitions, 1, {}))
        harness.send_kept(frames[:200])
        times, next_frame = _timed_rounds(harness, frames, 200, calls, rounds)
        for p in range(partitions):
            assert harness.broker.get_log("spread", p).log_end_offset == next_frame
        best, median = min(times) * 1e6, statistics.median(times) * 1e6
        benchmark.extra_info["us_per_request"] = round(best, 3)
        benchmark.extra_info["us_per_request_median"] = round(median, 3)
        report(f"Produce v9, acks=all, {partitions} partitions of a 1 KiB batch each: "
               f"{best:.2f} us/request best-of-{rounds}, {median:.2f} us median")
        benchmark.pedantic(lambda: harness.send_all(frames[next_frame : next_frame + calls]) or harness.drain(),
                           rounds=1, iterations=1)
    finally:
        harness.close()


# -- Fetch ----------------------------------------------------------------------------------

FETCH = 1
FETCH_VERSION = 11


def _fetch_frame(correlation_id: int, offset: int) -> bytes:
    """A consumer's Fetch v11 for one partition from ``offset``, answered at once
    (min_bytes 1, data there): one 200-byte record batch comes back through sendfile."""
    body = {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1,
                                                     "fetch_offset": offset, "log_start_offset": -1,
                                                     "partition_max_bytes": 1}]}],
    }
    return framing.encode_request(FETCH, FETCH_VERSION, correlation_id, "rdkafka", body)


# Requests in flight at once: a pipelining consumer, well under queued.max.requests.
FETCH_WINDOW = 100


async def _fetch_all(harness: Any, frames: list[bytes]) -> int:
    """Feed the frames as socket reads, FETCH_WINDOW at a time, and wait for every
    response; returns the bytes received."""
    received = 0
    for start in range(0, len(frames), FETCH_WINDOW):
        received += await _fetch_window(harness, frames[start : start + FETCH_WINDOW])
    return received


async def _fetch_window(harness: Any, frames: list[bytes]) -> int:
    loop = asyncio.get_running_loop()
    conn = harness.conn
    for frame in frames:
        n = len(frame)
        conn.get_buffer(n)[:n] = frame
        conn.buffer_updated(n)
    return await _read_answers(loop, harness.peer, len(frames))


async def _read_answers(loop: asyncio.AbstractEventLoop, peer: Any, count: int) -> int:
    """Reads ``count`` answer frames from ``peer``; the bytes received."""
    received, answered, pending = 0, 0, b""
    while answered < count:
        chunk = await loop.sock_recv(peer, 1 << 20)
        received += len(chunk)
        pending += chunk
        while len(pending) >= 4 and len(pending) >= 4 + _SIZE.unpack_from(pending, 0)[0]:
            pending = pending[4 + _SIZE.unpack_from(pending, 0)[0]:]
            answered += 1
    return received


def _time_fetches(benchmark: Any, report: Any, harness: Any, frames: list[bytes], repeats: int, what: str) -> None:
    """Sends ``frames`` ``repeats`` times, reporting the best and median microseconds per
    request, then once more for pytest-benchmark's own table."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        harness.run(_fetch_all(harness, frames))
        times.append((time.perf_counter() - start) / len(frames))
    best, median = min(times) * 1e6, statistics.median(times) * 1e6
    benchmark.extra_info["us_per_request"] = round(best, 3)
    report(f"{what}: {best:.2f} us/request best-of-{repeats}, {median:.2f} us median")
    benchmark.pedantic(lambda: harness.run(_fetch_all(harness, frames)), rounds=1, iterations=1)


@pytest.mark.benchmark(group="fetch-request")
def test_fetch_request(benchmark, report, tmp_path) -> None:  # type: ignore[no-untyped-def]
    disabled = getattr(benchmark, "disabled", False)
    calls, rounds = (100, 2) if disabled else (2000, 15)
    harness = _Harness(str(tmp_path / "data"))
    try:
        harness.send_kept(_frames(calls, idempotent=False))  # the records to fetch
        frames = [_fetch_frame(i, i) for i in range(calls)]
        received = harness.run(_fetch_all(harness, frames[:10]))
        assert received > 10 * len(RECORD_VALUE)  # record bytes came back
        _time_fetches(benchmark, report, harness, frames, rounds,
                      "Fetch v11, one partition, one 200 B record batch per request")
    finally:
        harness.close()


# -- the latency workload's Fetch -----------------------------------------------------------

WIDE_TOPIC = "wide"
WIDE_PARTITIONS = 8
WIDE_RECORDS = 5  # records of 1 KiB per batch, one batch per partition per round


def _wide_produce_frames(rounds: int) -> list[bytes]:
    """Produce v9 (what librdkafka sends), acks=all, one batch of five 1 KiB records per
    request, the partitions in turn."""
    frames = []
    for i in range(rounds * WIDE_PARTITIONS):
        batch = build_batch([(b"k", bytes(1024), 1_700_000_000_000 + i, [])] * WIDE_RECORDS)
        body = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                "topic_data": [{"name": WIDE_TOPIC, "partition_data": [
                    {"index": i % WIDE_PARTITIONS, "records": batch}]}]}
        frames.append(framing.encode_request(PRODUCE, 9, i, "rdkafka", body))
    return frames


def _wide_fetch_frame(correlation_id: int, topic_id: Any, offset: int) -> bytes:
    """Fetch v16 (what librdkafka sends) naming every partition by topic id, each from
    ``offset``: one 5 KiB batch comes back from each, answered at once."""
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 52428800, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": p, "current_leader_epoch": 0, "fetch_offset": offset, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": WIDE_RECORDS * 1024} for p in range(WIDE_PARTITIONS)]}]}
    return framing.encode_request(FETCH, 16, correlation_id, "rdkafka", body)


@pytest.mark.benchmark(group="fetch-request")
def test_fetch_request_wide(benchmark, report, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The consumer's Fetch of bench.latency: v16 over 8 partitions, a 5 KiB batch from
    each (about 42 KiB in one answer)."""
    from pykfk.server.handlers.metadata import topic_ids

    disabled = getattr(benchmark, "disabled", False)
    rounds, repeats = (20, 2) if disabled else (400, 15)
    harness = _Harness(str(tmp_path / "data"))
    try:
        harness.run(harness.broker.topics.create_topic(WIDE_TOPIC, WIDE_PARTITIONS, 1, {}))
        topic_id = topic_ids(harness.broker.metadata).id_of(WIDE_TOPIC)
        harness.send_kept(_wide_produce_frames(rounds))
        frames = [_wide_fetch_frame(i, topic_id, (i % rounds) * WIDE_RECORDS) for i in range(rounds)]
        received = harness.run(_fetch_all(harness, frames[:4]))
        assert received > 4 * WIDE_PARTITIONS * WIDE_RECORDS * 1024  # every partition's batch came back
        _time_fetches(benchmark, report, harness, frames, repeats, "Fetch v16, 8 partitions, a 5 KiB batch from each")
    finally:
        harness.close()


# -- a tailing consumer's Fetch: parked, then woken by an append ----------------------------

def _tail_frames(cycles: int, topic_id: Any) -> tuple[list[bytes], list[bytes]]:
    """Per cycle, the Fetch v16 of a consumer caught up on all 8 partitions (max_wait_ms
    500, min_bytes 1: it parks), and the Produce v9 (acks=all, one 1 KiB record) to one
    partition, in turn, that wakes it."""
    fetches, produces = [], []
    for i in range(cycles):
        body = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                "rack_id": "",
                "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition": p, "current_leader_epoch": 0,
                     "fetch_offset": i // WIDE_PARTITIONS + (1 if p < i % WIDE_PARTITIONS else 0),
                     "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                    for p in range(WIDE_PARTITIONS)]}]}
        fetches.append(framing.encode_request(FETCH, 16, 2 * i, "rdkafka", body))
        batch = build_batch([(b"k", bytes(1024), 1_700_000_000_000 + i, [])])
        produce = {"transactional_id": None, "acks": -1, "timeout_ms": 30000,
                   "topic_data": [{"name": WIDE_TOPIC, "partition_data": [
                       {"index": i % WIDE_PARTITIONS, "records": batch}]}]}
        produces.append(framing.encode_request(PRODUCE, 9, 2 * i + 1, "rdkafka", produce))
    return fetches, produces


async def _tail(harness: Any, fetches: list[bytes], produces: list[bytes]) -> int:
    """Each cycle: the fetch arrives and parks; a loop turn later the produce arrives, its
    append wakes the fetch; both answers are read. Returns the bytes received."""
    loop = asyncio.get_running_loop()
    conn = harness.conn
    received = 0
    for fetch, produce in zip(fetches, produces, strict=True):
        for frame in (fetch, produce):
            n = len(frame)
            conn.get_buffer(n)[:n] = frame
            conn.buffer_updated(n)
            await asyncio.sleep(0)  # the fetch parked before the append lands
        received += await _read_answers(loop, harness.peer, 2)
    return received


@pytest.mark.benchmark(group="fetch-request")
def test_fetch_request_parked(benchmark, report, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The latency workload's tailing consumer: a Fetch v16 over 8 partitions parks (no
    data), a Produce to one of them wakes it, and it answers with that record. Figures
    per cycle (fetch + produce): wall microseconds and this process's CPU microseconds."""
    from pykfk.server.handlers.metadata import topic_ids

    disabled = getattr(benchmark, "disabled", False)
    cycles, repeats = (40, 2) if disabled else (1000, 9)
    harness = _Harness(str(tmp_path / "data"))
    try:
        harness.run(harness.broker.topics.create_topic(WIDE_TOPIC, WIDE_PARTITIONS, 1, {}))
        topic_id = topic_ids(harness.broker.metadata).id_of(WIDE_TOPIC)
        fetches, produces = _tail_frames(cycles * (repeats + 2), topic_id)
        start = time.monotonic()
        received = harness.run(_tail(harness, fetches[:cycles], produces[:cycles]))
        assert received > cycles * 1024  # every fetch came back with its record
        assert time.monotonic() - start < cycles * 0.4  # woken by the appends, not max_wait_ms
        walls, cpus = [], []
        for r in range(1, repeats + 1):
            part = slice(r * cycles, (r + 1) * cycles)
            wall, cpu = time.perf_counter(), time.process_time()
            harness.run(_tail(harness, fetches[part], produces[part]))
            cpus.append((time.process_time() - cpu) / cycles)
            walls.append((time.perf_counter() - wall) / cycles)
        for p in range(WIDE_PARTITIONS):
            assert harness.broker.get_log(WIDE_TOPIC, p).log_end_offset == (repeats + 1) * cycles // WIDE_PARTITIONS
        best, median = min(walls) * 1e6, statistics.median(walls) * 1e6
        cpu_best, cpu_median = min(cpus) * 1e6, statistics.median(cpus) * 1e6
        benchmark.extra_info["us_per_cycle"] = round(best, 3)
        benchmark.extra_info["cpu_us_per_cycle"] = round(cpu_best, 3)
        report(f"Fetch v16 over 8 partitions parked, woken by a Produce (one cycle: both requests): "
               f"{best:.2f} us/cycle best-of-{repeats}, {median:.2f} median; CPU {cpu_best:.2f} us/cycle best, "
               f"{cpu_median:.2f} median")
        last = slice((repeats + 1) * cycles, (repeats + 2) * cycles)
        benchmark.pedantic(lambda: harness.run(_tail(harness, fetches[last], produces[last])),
                           rounds=1, iterations=1)
    finally:
        harness.close()
