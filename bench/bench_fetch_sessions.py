"""Incremental fetch sessions (KIP-227) against full fetches for a consumer and for a
follower of a 2,000-partition topic that have caught up (nothing new: the common steady
state of a wide consumer or follower): request bytes on the wire and broker CPU per Fetch.

    python -m pytest bench/bench_fetch_sessions.py -s                       # figures
    python -m pytest bench/bench_fetch_sessions.py --benchmark-disable      # one quick pass (CI)

Both candidates go through the real path of a standalone broker in this process (the
harness of bench_produce_request: Connection, Dispatcher, the Fetch handler, the
response encoder, a socketpair): a full Fetch v12 naming all 2,000 partitions every
time (what clients without sessions send), and an incremental one in an open session
naming none. Each is answered at once (max_wait_ms 0, min_bytes 0).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import pytest

from bench.bench_produce_request import _SIZE, _Harness
from pykfk.protocol import framing

FETCH = 1
VERSION = 12
TOPIC = "wide"
PARTITIONS = 2000


def _fetch_frame(correlation_id: int, session_id: int, epoch: int, partitions: int, replica_id: int = -1) -> bytes:
    body = {"replica_id": replica_id, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for p in range(partitions)]}] if partitions else []}
    return framing.encode_request(FETCH, VERSION, correlation_id, "bench", body)


async def _exchange(harness: Any, frame: bytes) -> bytes:
    """One frame, in as many reads as the connection's buffer takes; its response once
    the handler (which may await) has answered."""
    conn, view = harness.conn, memoryview(frame)
    while view:
        buffer = conn.get_buffer(len(view))
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        conn.buffer_updated(n)
        view = view[n:]
    loop = asyncio.get_running_loop()
    data = b""
    while len(data) < 4 or len(data) < 4 + _SIZE.unpack_from(data, 0)[0]:
        data += await loop.sock_recv(harness.peer, 1 << 20)
    return data


def _answer(harness: Any, frame: bytes) -> Any:
    data = harness.run(_exchange(harness, frame))
    (size,) = _SIZE.unpack_from(data, 0)
    return framing.decode_response(FETCH, VERSION, data[4:4 + size])[1]


def _timed(harness: Any, frames: list[bytes]) -> float:
    async def all_of_them() -> None:
        for frame in frames:
            await _exchange(harness, frame)

    start = time.perf_counter()
    harness.run(all_of_them())
    return (time.perf_counter() - start) / len(frames)


@pytest.mark.benchmark(group="fetch-sessions")
@pytest.mark.parametrize("replica_id", [-1, 1], ids=["consumer", "follower"])
def test_fetch_sessions(benchmark, report, tmp_path, replica_id) -> None:  # type: ignore[no-untyped-def]
    disabled = getattr(benchmark, "disabled", False)
    calls, rounds = (5, 2) if disabled else (50, 9)
    who = "consumer" if replica_id < 0 else "follower"
    harness = _Harness(str(tmp_path / "data"))
    try:
        harness.run(harness.broker.topics.create_topic(TOPIC, PARTITIONS, 1, {}))
        full = _fetch_frame(1, 0, -1, PARTITIONS, replica_id)
        answered = _answer(harness, full)
        assert sum(len(t.partitions) for t in answered.responses) == PARTITIONS
        opened = _answer(harness, _fetch_frame(2, 0, 0, PARTITIONS, replica_id))
        session_id = opened.session_id
        assert session_id != 0
        epochs = iter(range(1, calls * rounds + 10))
        first = _answer(harness, _fetch_frame(3, session_id, next(epochs), 0, replica_id))
        assert first.error_code == 0 and first.responses == []  # nothing new, nothing sent

        full_times, session_times = [], []
        for _ in range(rounds):
            full_times.append(_timed(harness, [full] * calls))
            frames = [_fetch_frame(4, session_id, next(epochs), 0, replica_id) for _ in range(calls)]
            session_times.append(_timed(harness, frames))
        incremental = _fetch_frame(4, session_id, 1, 0, replica_id)
        full_us, session_us = min(full_times) * 1e6, min(session_times) * 1e6
        benchmark.extra_info.update(full_request_bytes=len(full), session_request_bytes=len(incremental),
                                    full_us=round(full_us, 1), session_us=round(session_us, 1))
        report(f"Fetch v{VERSION} of a caught-up {who} of {PARTITIONS} partitions: request {len(full):,} B full, "
               f"{len(incremental)} B in a session ({len(full) / len(incremental):.0f}x smaller); broker "
               f"{full_us:.0f} us/request full vs {session_us:.0f} us in a session "
               f"({full_us / session_us:.1f}x less CPU; medians {statistics.median(full_times) * 1e6:.0f} / "
               f"{statistics.median(session_times) * 1e6:.0f} us)")
        benchmark.pedantic(lambda: _timed(harness, [_fetch_frame(5, session_id, next(epochs), 0, replica_id)]),
                           rounds=1, iterations=1)
    finally:
        harness.close()
