"""Produce-path cost of pykfk._core.records: validate + assign_offsets over 1 MiB of batches.

    python -m pytest bench/bench_batch_validate.py                       # figures + table
    python -m pytest bench/bench_batch_validate.py --benchmark-disable   # one quick pass (CI)

The payload is what a producer sends: ~16 KiB uncompressed batches of ~200-byte records
(key, 170-byte value, one header). The broker validates it (CRC-32C + record framing),
assigns offsets in place and appends it to the segment, so the figure that matters is
validate + assign + os.write against a bare os.write of the same bytes (target >= 0.7x;
bench_segment_append.py has the same figure with Segment.append in place of os.write).
Validation is called as pykfk.log.Log.append calls it on a leader. Times are best-of-N with the candidates taking turns (the machine is shared). The
pure-Python reference runs on one batch only.
"""

from __future__ import annotations

import os
import random
import tempfile

import pytest

import pykfk._core.records as core
import pykfk._reference.records as reference
from bench.timing import best_of_rounds, seconds_per_call
from pykfk.log.config import LogConfig

MIB = 1 << 20
RECORD_VALUE = 170          # + key, header and framing = ~200 bytes a record
BATCH_BYTES = 16 * 1024
MAX_MESSAGE_BYTES = LogConfig().max_message_bytes


def _payload() -> bytearray:
    rng = random.Random(7)
    per_batch = BATCH_BYTES // 200
    out = bytearray()
    while len(out) < MIB:
        records = [(b"key-%08d" % rng.getrandbits(24), rng.randbytes(RECORD_VALUE),
                    1_700_000_000_000 + i, [("trace", b"%08x" % rng.getrandbits(32))])
                   for i in range(per_batch)]
        out += core.build_batch(records)
    return out


PAYLOAD = _payload()
SIZES = core.validate_batches(PAYLOAD)
RECORDS = sum(h.records_count for h in SIZES)


def _effort(benchmark: object) -> tuple[int, int]:
    return (2, 2) if getattr(benchmark, "disabled", False) else (30, 20)


def _validate() -> list:
    return core.validate_batches(PAYLOAD, MAX_MESSAGE_BYTES, from_client=True, decompress=True)


def _validate_and_assign() -> int:
    _validate()
    return core.assign_offsets(PAYLOAD, 1_000, 7)


@pytest.mark.benchmark(group="produce-path-1MiB")
def test_validate_assign_vs_write(benchmark, report) -> None:  # type: ignore[no-untyped-def]
    rounds, calls = _effort(benchmark)
    with tempfile.TemporaryFile() as f:
        fd = f.fileno()

        def write() -> None:
            if os.lseek(fd, 0, os.SEEK_CUR) > 64 * MIB:   # keep the file (page cache) small
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, PAYLOAD)

        def produce() -> None:
            _validate_and_assign()
            write()

        t = best_of_rounds({"validate+assign": _validate_and_assign, "validate": _validate,
                   "assign": lambda: core.assign_offsets(PAYLOAD, 0), "os.write": write,
                   "validate+assign+write": produce}, rounds, calls)
    one = bytes(PAYLOAD[:SIZES[0].size])
    ref = seconds_per_call(lambda: (reference.validate_batches(one), reference.assign_offsets(bytearray(one), 0)), 1)
    mb = len(PAYLOAD) / 1e6
    ratio = t["os.write"] / t["validate+assign+write"]
    benchmark.extra_info.update({k + "_mb_s": round(mb / v) for k, v in t.items()})
    benchmark.extra_info["append_ratio"] = round(ratio, 2)
    report(
        f"{len(SIZES)} batches, {RECORDS} records, {len(PAYLOAD)} B: "
        f"validate+assign {mb / t['validate+assign']:.0f} MB/s "
        f"({t['validate+assign'] * 1e9 / RECORDS:.1f} ns/record; validate {mb / t['validate']:.0f}, "
        f"assign {mb / t['assign']:.0f} MB/s) | os.write {mb / t['os.write']:.0f} MB/s | "
        f"validate+assign+write {mb / t['validate+assign+write']:.0f} MB/s = {ratio:.2f}x of a bare "
        f"write (target >= 0.7x) | reference (pure Python, one batch) "
        f"{len(one) / ref / 1e6:.2f} MB/s"
    )
    benchmark(_validate_and_assign)


@pytest.mark.benchmark(group="produce-path-1MiB")
@pytest.mark.parametrize("check_records", [True, False], ids=["framing+crc", "crc-only"])
def test_validate_only(benchmark, check_records: bool) -> None:  # type: ignore[no-untyped-def]
    benchmark(core.validate_batches, PAYLOAD, 0, check_records)


@pytest.mark.benchmark(group="consume-1MiB")
@pytest.mark.parametrize("codec", [0, 4], ids=["none", "zstd"])
def test_decode_records(benchmark, report, codec: int) -> None:  # type: ignore[no-untyped-def]
    """Consumer side: columnar decode of the same records (no Python object per record)."""
    data = PAYLOAD if codec == 0 else b"".join(
        core.build_batch([(r.key, r.value, r.timestamp, r.headers) for r in core.iter_records(PAYLOAD[h_start:h_start + h.size])],
                         compression=codec)
        for h_start, h in _starts())
    rounds, calls = _effort(benchmark)
    t = best_of_rounds({"decode": lambda: core.decode_records(data)}, rounds, max(1, calls // 4))["decode"]
    report(f"decode_records codec={codec}: {len(data)} B in, {len(PAYLOAD) / t / 1e6:.0f} MB/s of "
           f"uncompressed batches, {t * 1e9 / RECORDS:.0f} ns/record")
    benchmark(core.decode_records, data)


def _starts():
    pos = 0
    for h in SIZES:
        yield pos, h
        pos += h.size
