"""Offset and time index search (pykfk._core.segment.index_lookup / timeindex_lookup /
used_entries) against the pure-Python reference, around the warm-section boundary, and
on every buffer kind."""

from __future__ import annotations

import bisect
import mmap
import random
import struct

import pytest

from pykfk._core import segment as core
from pykfk._reference import segment as ref

IMPLS = [pytest.param(core, id="core"), pytest.param(ref, id="reference")]

# Kafka's warm section is 8 KiB: 1024 offset entries, 682 time entries.
WARM_OFFSET_ENTRIES = 8192 // 8
WARM_TIME_ENTRIES = 8192 // 12


def _sample(targets: set[int], impl) -> list[int]:
    """Every target for the compiled search; a fixed sample for the linear reference."""
    ordered = sorted(targets)
    if impl is ref and len(ordered) > 200:
        ordered = ordered[:50] + random.Random(0).sample(ordered[50:-50], 100) + ordered[-50:]
    return ordered


def offset_index(n: int, rng: random.Random, first: tuple[int, int] = (3, 100)) -> bytes:
    rel, pos = first
    entries = []
    for _ in range(n):
        entries.append((rel, pos))
        rel += rng.randint(1, 50)
        pos += rng.randint(61, 9000)
    return ref.encode_index(entries)


def time_index(n: int, rng: random.Random) -> bytes:
    ts, rel = 1_600_000_000_000, 0
    entries = []
    for _ in range(n):
        entries.append((ts, rel))
        ts += rng.randint(1, 1000)
        rel += rng.randint(0, 30)
    return ref.encode_timeindex(entries)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", [0, 1, 2, 3, WARM_OFFSET_ENTRIES - 1, WARM_OFFSET_ENTRIES,
                               WARM_OFFSET_ENTRIES + 1, 3000])
def test_offset_lookup_finds_the_last_entry_at_or_below_the_target(impl, n):
    rng = random.Random(n)
    buf = offset_index(n, rng)
    rels = [struct.unpack_from(">i", buf, i * 8)[0] for i in range(n)]
    targets = {-1, 0, 2, 3, 4, 2**31 - 1} | set(rels) | {r + 1 for r in rels} | \
        {r - 1 for r in rels}
    if n > WARM_OFFSET_ENTRIES:  # both sides of the warm boundary
        edge = rels[n - WARM_OFFSET_ENTRIES - 1]
        targets |= {edge - 1, edge, edge + 1}
    for target in _sample(targets, impl):
        i = bisect.bisect_right(rels, target)
        want = struct.unpack_from(">ii", buf, (i - 1) * 8) if i else (-1, -1)
        assert impl.index_lookup(buf, target) == want, target
        assert impl.index_lookup(buf + bytes(800), target) == want   # preallocated zeros


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("n", [0, 1, 5, WARM_TIME_ENTRIES, WARM_TIME_ENTRIES + 1, 2000])
def test_time_lookup_finds_the_last_entry_at_or_below_the_timestamp(impl, n):
    rng = random.Random(n)
    buf = time_index(n, rng)
    tss = [struct.unpack_from(">q", buf, i * 12)[0] for i in range(n)]
    for target in _sample({0, 2**62} | set(tss) | {t + 1 for t in tss} | {t - 1 for t in tss},
                          impl):
        i = bisect.bisect_right(tss, target)
        want = struct.unpack_from(">qi", buf, (i - 1) * 12) if i else (-1, -1)
        assert impl.timeindex_lookup(buf, target) == want, target


@pytest.mark.parametrize("impl", IMPLS)
def test_used_entries_ends_at_the_last_non_zero_entry(impl):
    rng = random.Random(7)
    body = offset_index(10, rng)
    assert impl.used_entries(body + bytes(8 * 50), 8) == 10
    assert impl.used_entries(bytes(8 * 50), 8) == 0
    assert impl.used_entries(b"", 8) == 0
    # entry 0 may be all zeros (relative offset 0 at position 0) when others follow
    zero_first = ref.encode_index([(0, 0), (5, 700)]) + bytes(80)
    assert impl.used_entries(zero_first, 8) == 2
    assert impl.index_lookup(zero_first, 0) == (0, 0)
    assert impl.index_lookup(zero_first, 4) == (0, 0)
    assert impl.index_lookup(zero_first, 5) == (5, 700)
    times = ref.encode_timeindex([(0, 0), (9, 3)]) + bytes(24)
    assert impl.used_entries(times, 12) == 2
    # a partial trailing entry is not an entry
    assert impl.used_entries(body + b"\x01\x02", 8) == 10


@pytest.mark.parametrize("impl", IMPLS)
def test_explicit_entry_count_limits_the_search(impl):
    buf = ref.encode_index([(1, 10), (2, 20), (3, 30)])
    assert impl.index_lookup(buf, 100, 2) == (2, 20)
    assert impl.index_lookup(buf, 100, 0) == (-1, -1)


def test_entry_count_larger_than_the_buffer_is_refused():
    with pytest.raises(ValueError):
        core.index_lookup(bytes(16), 5, 3)
    with pytest.raises(ValueError):
        core.used_entries(bytes(16), 7)


def test_every_buffer_kind_and_no_export_left_behind():
    buf = offset_index(100, random.Random(1))
    want = core.index_lookup(buf, 700)
    m = mmap.mmap(-1, len(buf))
    m.write(buf)
    for kind in (bytes(buf), bytearray(buf), memoryview(buf), memoryview(bytearray(buf)), m):
        assert core.index_lookup(kind, 700) == want
    m.resize(len(buf) * 2)   # BufferError if the lookup had kept an export
    m.close()
    with pytest.raises(BufferError):
        core.index_lookup(memoryview(buf)[::2], 700)


def test_random_indexes_agree_with_the_reference():
    rng = random.Random(99)
    for _ in range(30):
        n = rng.randint(0, 1500)
        buf = offset_index(n, rng, first=(rng.randint(0, 5), rng.randint(0, 5)))
        tbuf = time_index(n, rng)
        for _ in range(20):
            target = rng.randint(-5, 2 ** 17)
            assert core.index_lookup(buf, target) == ref.index_lookup(buf, target)
            ts = 1_600_000_000_000 + rng.randint(-10, n * 1000)
            assert core.timeindex_lookup(tbuf, ts) == ref.timeindex_lookup(tbuf, ts)
