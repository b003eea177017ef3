"""Offset lookup in a segment whose .index holds 1M entries (target < 2 us a lookup).

    python -m pytest bench/bench_index_lookup.py                       # figures + table
    python -m pytest bench/bench_index_lookup.py --benchmark-disable   # one quick pass (CI)

The segment is built once per run: 1,000,001 one-record batches (~70 MB of .log) with
index_interval_bytes=0, so every batch after the first has an .index entry. Figures per
lookup, over 1000 random offsets (random targets defeat the warm-tail shortcut, so this is
the full binary search) and over the last 1000 offsets (the consumer-at-the-tail case):

* index_lookup   binary search of the mmap'd .index only
* position_of    index search + pread of the batch header that holds the offset
* read           position_of + the end of a 1 MiB whole-batch range (a Fetch's planning)

Baselines: bisect.bisect_right over a Python list of the same relative offsets (stdlib,
in memory) and the pure-Python reference's linear search (one lookup).
"""

from __future__ import annotations

import bisect
import mmap
import random
import struct
import time

import pytest

from pykfk._core.segment import Segment
from pykfk._reference import segment as reference

ENTRIES = 1_000_000
LOOKUPS = 1000


def _one_record_batch(base_offset: int) -> bytes:
    try:
        from pykfk._core.records import build_batch
        return build_batch([(None, b"v", 1_700_000_000_000, [])], base_offset=base_offset)
    except ImportError:  # pragma: no cover - records not built
        import crc32c
        record = b"\x00\x00\x00\x01\x02v\x00"
        body_after_crc = struct.pack(">hiqqqhii", 0, 0, 1_700_000_000_000, 1_700_000_000_000,
                                     -1, -1, -1, 1) + bytes([len(record) * 2]) + record
        body = struct.pack(">ibI", -1, 2, crc32c.crc32c(body_after_crc)) + body_after_crc
        return struct.pack(">qi", base_offset, len(body)) + body


@pytest.fixture(scope="module")
def big_segment(tmp_path_factory):
    d = tmp_path_factory.mktemp("index1m")
    template = _one_record_batch(0)
    size = len(template)
    chunk_batches = 65536
    seg = Segment(str(d), 0, index_interval_bytes=0, max_index_bytes=(ENTRIES + 1) * 8)
    chunk = bytearray(template * chunk_batches)
    offset = 0
    total = ENTRIES + 1
    while offset < total:
        n = min(chunk_batches, total - offset)
        for i in range(n):   # base_offset is outside the CRC: patch it in place
            struct.pack_into(">q", chunk, i * size, offset + i)
        seg.append(chunk, 0, n * size)
        offset += n
    assert seg.index_entries == ENTRIES
    yield seg
    seg.delete()


def _per_call(function, args, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for a in args:
            function(a)
        best = min(best, (time.perf_counter() - start) / len(args))
    return best


@pytest.mark.benchmark(group="index-lookup-1M")
@pytest.mark.parametrize("where", ["random", "tail"])
def test_lookup(benchmark, report, big_segment, where) -> None:  # type: ignore[no-untyped-def]
    seg = big_segment
    rng = random.Random(5)
    if where == "random":
        targets = [rng.randrange(seg.next_offset) for _ in range(LOOKUPS)]
    else:
        targets = list(range(seg.next_offset - LOOKUPS, seg.next_offset))
    rounds = 1 if getattr(benchmark, "disabled", False) else 20
    rels = [seg.index_entry(i)[0] for i in range(ENTRIES)] if where == "random" else None
    t_index = _per_call(seg.index_lookup, targets, rounds)
    t_position = _per_call(seg.position_of, targets, rounds)
    t_read = _per_call(lambda o: seg.read(o, 1 << 20), targets, rounds)
    line = (f"{where} offsets, {ENTRIES} entries: index_lookup {t_index * 1e9:.0f} ns | "
            f"position_of {t_position * 1e9:.0f} ns | read(1 MiB) {t_read * 1e9:.0f} ns "
            f"(target < 2000 ns)")
    if rels is not None:
        t_bisect = _per_call(lambda o: bisect.bisect_right(rels, o), targets, rounds)
        with open(seg.index_path, "rb") as f, \
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            start = time.perf_counter()
            reference.index_lookup(m, targets[0], ENTRIES)
            t_ref = time.perf_counter() - start
        line += (f" | baseline bisect over a list {t_bisect * 1e9:.0f} ns | "
                 f"reference linear search {t_ref * 1e3:.0f} ms")
    benchmark.extra_info.update(index_lookup_ns=round(t_index * 1e9),
                                position_of_ns=round(t_position * 1e9))
    report(line)

    def lookups() -> None:
        for o in targets:
            seg.position_of(o)

    benchmark(lookups)
