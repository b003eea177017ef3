"""Log.append (a partition's whole produce path) against a bare os.write of the same bytes.

    python -m pytest bench/bench_log_append.py                       # figures + table
    python -m pytest bench/bench_log_append.py --benchmark-disable   # one quick pass (CI)

Payload: 1 MiB of batches of ~200-byte records, 16 KiB batches (the producer default
batch.size) and 1 KiB batches (a latency-tuned producer: 16 times the batches per MiB),
each written by a plain producer (producer id -1) and by an idempotent one (one producer
id, sequences running on across batches and MiB, so every append passes the sequence
checks and updates the producer state).

Candidates, timed in turns in the same run (the machine is shared; best-of-N with the
median of the per-round ratios beside it), each over `calls` distinct MiB going to page
cache:

- os.write: the bytes written to a file, nothing else (the floor);
- core: validate_batches + assign_offsets + Segment.append exactly as a leader's
  Log.append calls them, without the log's Python bookkeeping;
- follower core: validate_batches + Segment.append as a follower's Log.append calls them;
- leader: Log.append(assign_offsets=True), what a Produce request costs one partition;
- follower: Log.append(assign_offsets=False) of the leader's output, as replication does.

Each line gives speeds as a fraction of os.write's (higher is better, 1.0 is os.write's
speed) and the bookkeeping: Log.append's time per batch beyond its core's.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable

import pytest

from pykfk._core import records
from pykfk._core.segment import Segment
from pykfk.log.config import LogConfig
from pykfk.log.log import Log

MIB = 1 << 20
RECORD_VALUE = 170  # + key, header and framing = ~200 bytes a record
LEADER_EPOCH = 7
PRODUCER_ID = 4242


def _one_mib(batch_bytes: int, idempotent: bool, first_sequence: int,
             rng: random.Random) -> tuple[bytearray, int]:
    """One MiB of batches (offsets from 0); returns it and the next producer sequence."""
    per_batch = max(1, batch_bytes // 200)
    out = bytearray()
    sequence = first_sequence
    while len(out) < MIB:
        recs = [(b"key-%08d" % rng.getrandbits(24), rng.randbytes(RECORD_VALUE),
                 1_700_000_000_000 + i, [("trace", b"%08x" % rng.getrandbits(32))])
                for i in range(per_batch)]
        if idempotent:
            out += records.build_batch(recs, producer_id=PRODUCER_ID, producer_epoch=0,
                                       base_sequence=sequence)
            sequence += per_batch
        else:
            out += records.build_batch(recs)
    return out, sequence


def _payloads(batch_bytes: int, idempotent: bool, copies: int) -> list[bytearray]:
    """`copies` distinct MiB as a producer sends them (offsets 0..), sequences continuing."""
    rng = random.Random(batch_bytes)
    out, sequence = [], 0
    for _ in range(copies):
        payload, sequence = _one_mib(batch_bytes, idempotent, sequence, rng)
        out.append(payload)
    return out


def _as_replicated(payloads: list[bytearray]) -> list[bytearray]:
    """The same batches as the leader stored them: offsets running on, its leader epoch."""
    out, next_offset = [], 0
    for p in payloads:
        copy = bytearray(p)
        next_offset = records.assign_offsets(copy, next_offset, LEADER_EPOCH)
        out.append(copy)
    return out


def _times(functions: dict[str, tuple[Callable[[], object], Callable[[], object]]],
           rounds: int) -> dict[str, list[float]]:
    """Every round's time of each candidate, the candidates taking turns."""
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, (function, reset) in functions.items():
            reset()
            start = time.perf_counter()
            function()
            times[name].append(time.perf_counter() - start)
    return times


@pytest.mark.benchmark(group="log-append-1MiB")
@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
@pytest.mark.parametrize("batch_bytes", [16 * 1024, 1024], ids=["16KiB-batches", "1KiB-batches"])
def test_log_append_vs_os_write(benchmark, report, tmp_path, batch_bytes,  # type: ignore[no-untyped-def]
                                idempotent) -> None:
    disabled = getattr(benchmark, "disabled", False)
    calls, rounds = (2, 1) if disabled else (8, 15)
    payloads = _payloads(batch_bytes, idempotent, calls)
    replicated = _as_replicated(payloads)
    batches = len(records.validate_batches(payloads[0]))
    config = LogConfig()
    leader = Log(str(tmp_path / "leader-0"), config)
    follower = Log(str(tmp_path / "follower-0"), config)
    for name in ("core", "follower-core"):
        os.makedirs(tmp_path / name)
    core_seg = Segment(str(tmp_path / "core"), 0)
    follower_seg = Segment(str(tmp_path / "follower-core"), 0)
    raw_fd = os.open(tmp_path / "raw.bin", os.O_RDWR | os.O_CREAT, 0o644)

    def reset_raw() -> None:
        os.ftruncate(raw_fd, 0)
        os.lseek(raw_fd, 0, os.SEEK_SET)

    def reset_log(log: Log) -> Callable[[], None]:
        def reset() -> None:
            log.truncate_to(0)  # also forgets the producer state: sequences start again
            log.sweep_deleted_segments(force=True)
        return reset

    def os_write() -> None:
        for p in payloads:
            os.write(raw_fd, p)

    def core() -> None:
        for p in payloads:
            records.validate_batches(p, config.max_message_bytes, from_client=True,
                                     decompress=True)
            records.assign_offsets(p, core_seg.next_offset, LEADER_EPOCH)
            core_seg.append(p)

    def follower_core() -> None:
        for p in replicated:
            records.validate_batches(p, config.max_message_bytes)
            follower_seg.append(p)

    def leader_append() -> None:
        for p in payloads:
            leader.append(p, leader_epoch=LEADER_EPOCH)

    def follower_append() -> None:
        for p in replicated:
            follower.append(p, leader_epoch=LEADER_EPOCH, assign_offsets=False)

    candidates = {
        "os.write": (os_write, reset_raw),
        "core": (core, lambda: core_seg.truncate_to(0)),
        "follower core": (follower_core, lambda: follower_seg.truncate_to(0)),
        "leader": (leader_append, reset_log(leader)),
        "follower": (follower_append, reset_log(follower)),
    }
    try:
        times = _times(candidates, rounds)
        # A final check that the timed appends really stored everything.
        assert leader.log_end_offset == follower.log_end_offset == core_seg.next_offset \
            == follower_seg.next_offset > 0
        if idempotent:
            assert PRODUCER_ID in leader.producer_state.producers
            assert PRODUCER_ID in follower.producer_state.producers

        mb = calls * MIB / 1e6
        write = times["os.write"]
        line = (f"{batches} batches/MiB, {'idempotent' if idempotent else 'plain'}: "
                f"os.write {mb / min(write):.0f} MB/s")
        for name in ("core", "follower core", "leader", "follower"):
            ts = times[name]
            best = min(write) / min(ts)
            median = statistics.median(w / t for w, t in zip(write, ts))
            per_batch_us = min(ts) / (calls * batches) * 1e6
            line += (f" | {name} {mb / min(ts):.0f} MB/s = {best:.2f}x of os.write best-of, "
                     f"{median:.2f}x median, {per_batch_us:.2f} us/batch")
            key = name.replace(" ", "_")
            benchmark.extra_info[f"{key}_ratio"] = round(best, 3)
            benchmark.extra_info[f"{key}_ratio_median"] = round(median, 3)
        for name, core_name in (("leader", "core"), ("follower", "follower core")):
            overhead_us = (min(times[name]) - min(times[core_name])) / (calls * batches) * 1e6
            line += f" | {name} bookkeeping {overhead_us:.2f} us/batch"
        report(line)

        # pytest-benchmark's own table: one leader append of one MiB.
        it = iter(range(1 << 30))

        def one_leader_append() -> None:
            k = next(it) % calls
            if k == 0:
                reset_log(leader)()
            leader.append(payloads[k], leader_epoch=LEADER_EPOCH)

        benchmark(one_leader_append)
    finally:
        leader.close()
        follower.close()
        core_seg.close()
        follower_seg.close()
        os.close(raw_fd)
