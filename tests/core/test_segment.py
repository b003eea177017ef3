"""pykfk._core.segment.Segment: append, lookups, reads, recovery, index rebuild, truncation,
checked against the pure-Python oracle in pykfk._reference.segment."""

from __future__ import annotations

import bisect
import mmap
import os
import random
import shutil
import struct
import threading

import crc32c
import pytest

from pykfk._core.errors import CorruptBatchError, IndexCorruptError
from pykfk._core.segment import Segment
from pykfk._reference import segment as ref

try:
    from pykfk._core.records import build_batch as _records_build_batch
except ImportError:  # records not built: the local builder below is used
    _records_build_batch = None


# ---- a small batch builder ------------------------------------------------------------

def _varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _local_build_batch(values: list[bytes], base_offset: int, timestamps: list[int]) -> bytes:
    """A minimal magic-2 batch (layout in src/_core/batch.h), CRC-32C from the crc32c package."""
    base_ts = timestamps[0]
    records = bytearray()
    for i, (value, ts) in enumerate(zip(values, timestamps)):
        body = b"\x00" + _varint(ts - base_ts) + _varint(i) + _varint(-1) + _varint(len(value)) \
            + value + _varint(0)
        records += _varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, base_ts, max(timestamps), -1, -1, -1,
                            len(values)) + records
    crc = crc32c.crc32c(after_crc)
    body = struct.pack(">ibI", -1, 2, crc) + after_crc
    return struct.pack(">qi", base_offset, len(body)) + body


def make_batch(base_offset: int, count: int = 1, value_size: int = 20, timestamp: int = 1000,
               timestamps: list[int] | None = None) -> bytes:
    """One valid batch of `count` records at base_offset."""
    tss = timestamps if timestamps is not None else [timestamp + i for i in range(count)]
    values = [bytes([65 + (base_offset + i) % 26]) * value_size for i in range(count)]
    if _records_build_batch is not None:
        return _records_build_batch([(None, v, t, []) for v, t in zip(values, tss)],
                                    base_offset=base_offset)
    return _local_build_batch(values, base_offset, tss)


def random_batches(rng: random.Random, n: int, base_offset: int = 0, gaps: bool = True,
                   ts_start: int = 10_000) -> list[bytes]:
    """n batches with random sizes, record counts, offset gaps and timestamps that mostly
    grow but sometimes go back (as producers' create times do)."""
    out = []
    offset = base_offset
    ts = ts_start
    for _ in range(n):
        count = rng.randint(1, 6)
        ts += rng.randint(-30, 60)
        out.append(make_batch(offset, count, rng.randint(0, 300),
                              timestamps=[ts + rng.randint(-5, 5) for _ in range(count)]))
        offset += count + (rng.randint(0, 3) if gaps and rng.random() < 0.2 else 0)
    return out


def log_bytes(seg: Segment) -> bytes:
    with open(seg.path, "rb") as f:
        return f.read()


def expected_indexes(seg: Segment) -> tuple[list, list]:
    batches, _ = ref.scan(log_bytes(seg), seg.base_offset)
    return ref.build_indexes(batches, seg.base_offset, seg.index_interval_bytes,
                             seg.max_index_bytes // 12)


def actual_indexes(seg: Segment) -> tuple[list, list]:
    offsets = [(o - seg.base_offset, p) for o, p in
               (seg.index_entry(i) for i in range(seg.index_entries))]
    times = [(t, o - seg.base_offset) for t, o in
             (seg.timeindex_entry(i) for i in range(seg.timeindex_entries))]
    return offsets, times


def assert_matches_reference(seg: Segment) -> list[ref.BatchInfo]:
    """The segment's state and both indexes equal what the oracle derives from the .log."""
    data = log_bytes(seg)
    batches, end = ref.scan(data, seg.base_offset)
    assert end == seg.size == len(data)
    assert seg.next_offset == (batches[-1].last_offset + 1 if batches else seg.base_offset)
    assert seg.max_timestamp == max((b.max_timestamp for b in batches), default=-1)
    assert seg.first_batch_timestamp == (batches[0].max_timestamp if batches else -1)
    assert actual_indexes(seg) == expected_indexes(seg)
    assert seg.sanity_check(deep=True)
    return batches


@pytest.fixture
def rng() -> random.Random:
    return random.Random(20240607)


# ---- creation, naming, append ---------------------------------------------------------

def test_new_segment_creates_its_log_at_once_and_its_indexes_at_close(tmp_path):
    seg = Segment(str(tmp_path), 1234, max_index_bytes=1000)
    # one file per new partition: the indexes wait for their first entry
    assert sorted(os.listdir(tmp_path)) == ["00000000000000001234.log"]
    assert seg.path == str(tmp_path / "00000000000000001234.log")
    assert (seg.base_offset, seg.size, seg.next_offset) == (1234, 0, 1234)
    assert (seg.max_timestamp, seg.first_batch_timestamp) == (-1, -1)
    assert (seg.index_entries, seg.timeindex_entries) == (0, 0)
    seg.close()
    assert sorted(os.listdir(tmp_path)) == ["00000000000000001234.index",
                                            "00000000000000001234.log",
                                            "00000000000000001234.timeindex"]
    assert os.path.getsize(seg.index_path) == 0 and os.path.getsize(seg.timeindex_path) == 0


def test_a_segment_in_a_new_directory_looks_for_no_index_and_indexes_as_usual(tmp_path):
    seg = Segment(str(tmp_path), 0, index_interval_bytes=1, max_index_bytes=1000, new=True)
    assert sorted(os.listdir(tmp_path)) == ["00000000000000000000.log"]
    seg.append(make_batch(0, 2))
    seg.append(make_batch(2, 2))
    entry = seg.index_lookup(3)
    assert seg.index_entries == 1 and entry[1] == seg.size // 2  # the second batch's
    seg.close()
    reopened = Segment(str(tmp_path), 0, index_interval_bytes=1, max_index_bytes=1000)
    assert (reopened.index_entries, reopened.next_offset, reopened.indexes_rebuilt) == (1, 4, False)
    assert reopened.index_lookup(3) == entry
    reopened.close()


def test_first_index_entry_extends_the_indexes_to_max_index_bytes(tmp_path):
    seg = Segment(str(tmp_path), 0, index_interval_bytes=1, max_index_bytes=1000)
    seg.append(make_batch(0, 2))
    seg.append(make_batch(2, 2))
    assert seg.index_entries == 1
    # extended (sparsely) to max_index_bytes rounded down to whole entries while active
    assert os.path.getsize(seg.index_path) == 1000
    assert os.path.getsize(seg.timeindex_path) == 996
    seg.close()
    assert os.path.getsize(seg.index_path) == 8 and os.path.getsize(seg.timeindex_path) == 12


def test_append_returns_positions_and_tracks_offsets_and_timestamps(tmp_path):
    seg = Segment(tmp_path, 100)
    b1 = make_batch(100, 3, timestamps=[5000, 5002, 5001])
    b2 = make_batch(103, 2, timestamps=[4000, 4001])
    assert seg.append(b1) == 0
    assert seg.append(b2) == len(b1)
    assert seg.size == len(b1) + len(b2) == os.path.getsize(seg.path)
    assert seg.next_offset == 105
    assert seg.max_timestamp == 5002
    assert seg.first_batch_timestamp == 5002
    assert log_bytes(seg) == b1 + b2
    seg.close()


def test_append_accepts_every_contiguous_buffer_kind_and_keeps_no_export(tmp_path):
    seg = Segment(tmp_path, 0)
    batches = [make_batch(i) for i in range(5)]
    seg.append(batches[0])
    seg.append(bytearray(batches[1]))
    seg.append(memoryview(batches[2]))
    joined = bytearray(b"junk" + batches[3] + b"tail")
    seg.append(joined, 4, 4 + len(batches[3]))
    joined += b"x"  # resizing works: no buffer export outlived the call
    m = mmap.mmap(-1, len(batches[4]))
    m.write(batches[4])
    seg.append(m)
    m.close()  # BufferError here would mean the segment kept an export
    with pytest.raises(BufferError):
        seg.append(memoryview(b"".join(batches))[::2])
    assert seg.next_offset == 5
    assert log_bytes(seg) == b"".join(batches)
    seg.close()


@pytest.mark.parametrize("damage, error", [
    (lambda b: b[:-1], CorruptBatchError),                                  # torn batch
    (lambda b: b[:30], CorruptBatchError),                                  # torn header
    (lambda b: b[:16] + b"\x01" + b[17:], CorruptBatchError),               # magic 1
    (lambda b: b[:8] + struct.pack(">i", 10) + b[12:], CorruptBatchError),  # length < header
    (lambda b: b[:8] + struct.pack(">i", 2**31 - 1) + b[12:], CorruptBatchError),
    (lambda b: b[:23] + struct.pack(">i", -1) + b[27:], CorruptBatchError),
])
def test_append_rejects_bad_framing_and_writes_nothing(tmp_path, damage, error):
    seg = Segment(tmp_path, 0)
    seg.append(make_batch(0))
    before = log_bytes(seg)
    with pytest.raises(error):
        seg.append(make_batch(1) + damage(make_batch(2)))
    assert log_bytes(seg) == before and seg.size == len(before) and seg.next_offset == 1
    seg.close()


def test_append_rejects_offsets_that_do_not_follow_on(tmp_path):
    seg = Segment(tmp_path, 10)
    with pytest.raises(ValueError, match="base_offset 9"):
        seg.append(make_batch(9))          # below the segment's base offset
    seg.append(make_batch(10, 3))
    with pytest.raises(ValueError, match="base_offset 12"):
        seg.append(make_batch(12))         # overlaps offsets 10..12
    with pytest.raises(ValueError):
        seg.append(make_batch(20) + make_batch(20))
    with pytest.raises(ValueError, match="roll"):
        seg.append(make_batch(10 + 2**31))  # relative offset no longer fits in int32
    assert seg.next_offset == 13 and seg.size == len(make_batch(10, 3))
    seg.close()


def test_index_points_follow_kafkas_interval_rule(tmp_path, rng):
    seg = Segment(tmp_path, 500, index_interval_bytes=700)
    batches = random_batches(rng, 300, 500)
    i = 0
    while i < len(batches):  # appended in chunks of 1..8 batches
        k = rng.randint(1, 8)
        seg.append(b"".join(batches[i:i + k]))
        i += k
    assert seg.index_entries > 20 and seg.timeindex_entries > 5
    assert_matches_reference(seg)
    seg.close()


def test_index_interval_zero_indexes_every_batch_but_the_first(tmp_path):
    seg = Segment(tmp_path, 0, index_interval_bytes=0)
    batches = [make_batch(i * 2, 2, timestamp=100 + i) for i in range(10)]
    seg.append(b"".join(batches))
    assert seg.index_entries == 9
    pos = len(batches[0])
    assert seg.index_entry(0) == (3, pos)   # the batch's last offset -> its position
    assert seg.index_lookup(2) == (0, 0)   # below the first entry: (base_offset, 0)
    assert seg.index_lookup(3) == (3, pos)
    assert seg.index_lookup(10**9) == seg.index_entry(8)
    seg.close()


# ---- lookups and reads ----------------------------------------------------------------

def test_position_of_read_and_offset_for_timestamp_match_reference(tmp_path, rng):
    seg = Segment(tmp_path, 1000, index_interval_bytes=512)
    for b in random_batches(rng, 200, 1000):
        seg.append(b)
    batches = assert_matches_reference(seg)
    size = seg.size
    for offset in list(range(990, seg.next_offset + 3)):
        assert seg.position_of(offset) == ref.position_of(batches, offset, size), offset
    for _ in range(400):
        offset = rng.randint(1000, seg.next_offset + 2)
        max_bytes = rng.choice([0, 1, 100, 500, 2000, 10_000, 1 << 20])
        max_position = rng.choice([-1, -1, rng.randint(0, size), size, size + 100])
        got = seg.read(offset, max_bytes, max_position)
        assert got == ref.read(batches, offset, max_bytes, max_position), (offset, max_bytes,
                                                                           max_position)
    timestamps = sorted({b.max_timestamp for b in batches})
    for ts in [0, *timestamps, *(t + 1 for t in timestamps), 10**15]:
        assert seg.offset_for_timestamp(ts) == ref.offset_for_timestamp(batches, ts), ts
    seg.close()


def test_read_returns_whole_batches_within_max_bytes_and_max_position(tmp_path):
    seg = Segment(tmp_path, 0)
    sizes = []
    for i in range(6):
        b = make_batch(i * 10, 10, value_size=100)
        sizes.append(len(b))
        seg.append(b)
    assert seg.read(0, 1) == (0, sizes[0])            # one batch even over max_bytes
    assert seg.read(15, sizes[1] + sizes[2] - 1) == (sizes[0], sizes[1])
    assert seg.read(15, sizes[1] + sizes[2]) == (sizes[0], sizes[1] + sizes[2])
    assert seg.read(0, 1 << 30, max_position=sizes[0] + sizes[1]) == (0, sizes[0] + sizes[1])
    assert seg.read(0, 1 << 30, max_position=sizes[0] - 1) is None   # cap inside the batch
    assert seg.read(60, 1 << 30) is None                               # offset >= next_offset
    assert seg.read(59, 1 << 30) == (sum(sizes[:5]), sizes[5])
    seg.close()


def test_many_segments_of_a_partition_log(tmp_path, rng):
    """A partition log made of rolled segments: find the segment by base offset, read from
    it, and the bytes returned start with the batch holding the offset."""
    segments: list[Segment] = []
    batches = random_batches(rng, 400, 0)
    for b in batches:
        if not segments or segments[-1].size > 4000:
            base = struct.unpack_from(">q", b)[0]
            segments.append(Segment(tmp_path, base, index_interval_bytes=256))
        segments[-1].append(b)
    assert len(segments) > 10
    bases = [s.base_offset for s in segments]
    for offset in range(0, segments[-1].next_offset, 7):
        seg = segments[bisect.bisect_right(bases, offset) - 1]
        got = seg.read(offset, 3000)
        if got is None:  # an offset in a gap past the end of this segment
            assert offset >= seg.next_offset
            continue
        pos, length = got
        infos, _ = ref.scan(log_bytes(seg), seg.base_offset)
        assert pos == ref.position_of(infos, offset, seg.size)
        data = os.pread(seg.fileno(), length, pos)
        assert ref.parse_header(data, 0).last_offset >= offset
        _, end = ref.scan(data, ref.parse_header(data, 0).base_offset)
        assert end == length <= max(3000, ref.parse_header(data, 0).size)  # whole batches
    for s in segments:
        s.close()
        reopened = Segment(tmp_path, s.base_offset, index_interval_bytes=256)
        assert not reopened.indexes_rebuilt
        assert_matches_reference(reopened)
        reopened.close()


# ---- reopen ---------------------------------------------------------------------------

def test_reopen_after_clean_close_and_after_a_crash_finds_the_entry_counts(tmp_path, rng):
    live, crashed = tmp_path / "live", tmp_path / "crashed"
    live.mkdir()
    seg = Segment(live, 0, index_interval_bytes=300, max_index_bytes=64 * 1024)
    for b in random_batches(rng, 150, 0):
        seg.append(b)
    entries = (seg.index_entries, seg.timeindex_entries)
    state = (seg.size, seg.next_offset, seg.max_timestamp, seg.first_batch_timestamp)
    # a crash: the files as they are while open (indexes preallocated, zeros after the
    # used entries)
    shutil.copytree(live, crashed)
    assert os.path.getsize(crashed / "00000000000000000000.index") == 64 * 1024
    seg.close()
    for d in (live, crashed):
        again = Segment(d, 0, index_interval_bytes=300, max_index_bytes=64 * 1024)
        assert not again.indexes_rebuilt and not again.needs_recovery
        assert (again.index_entries, again.timeindex_entries) == entries
        assert (again.size, again.next_offset, again.max_timestamp,
                again.first_batch_timestamp) == state
        # appending continues the same index sequence as if never closed
        for b in random_batches(rng, 40, again.next_offset, ts_start=again.max_timestamp):
            again.append(b)
        assert_matches_reference(again)
        again.close()


def test_first_time_index_entry_at_timestamp_zero_survives_reopen(tmp_path):
    """Entry 0 of an index may legitimately be all zeros when later entries follow."""
    seg = Segment(tmp_path, 0, index_interval_bytes=0)
    seg.append(make_batch(0, 1, timestamp=0))
    seg.append(make_batch(1, 1, timestamp=0))   # first time entry (0, 0): all zero bytes
    seg.append(make_batch(2, 1, timestamp=7))
    assert [seg.timeindex_entry(i) for i in range(seg.timeindex_entries)] == [(0, 0), (7, 2)]
    seg.close()
    seg = Segment(tmp_path, 0, index_interval_bytes=0)
    assert not seg.indexes_rebuilt
    assert [seg.timeindex_entry(i) for i in range(seg.timeindex_entries)] == [(0, 0), (7, 2)]
    assert seg.offset_for_timestamp(0) == 0 and seg.offset_for_timestamp(1) == 2
    seg.close()


# ---- recovery -------------------------------------------------------------------------

def _fill(tmp_path, rng, n=120, interval=400) -> tuple[Segment, list[bytes]]:
    seg = Segment(tmp_path, 50, index_interval_bytes=interval)
    batches = random_batches(rng, n, 50, gaps=False)
    for b in batches:
        seg.append(b)
    return seg, batches


def test_recover_truncates_a_torn_tail(tmp_path, rng):
    seg, batches = _fill(tmp_path, rng)
    seg.close()
    keep = sum(map(len, batches[:-1]))
    os.truncate(seg.path, keep + len(batches[-1]) // 2)
    seg = Segment(tmp_path, 50, index_interval_bytes=400)
    assert seg.needs_recovery
    assert seg.size == keep                   # only whole batches are served meanwhile
    assert seg.read(seg.next_offset - 1, 1 << 20) is not None
    with pytest.raises(RuntimeError, match="recover"):
        seg.append(make_batch(seg.next_offset))
    assert seg.recover() == len(batches[-1]) // 2
    assert not seg.needs_recovery and os.path.getsize(seg.path) == keep
    assert_matches_reference(seg)
    seg.append(make_batch(seg.next_offset))   # and the log continues
    seg.close()


@pytest.mark.parametrize("garbage", [b"\x00" * 100, b"\xff" * 7, os.urandom(5000)])
def test_recover_truncates_garbage_appended_to_the_log(tmp_path, rng, garbage):
    seg, batches = _fill(tmp_path, rng)
    seg.close()
    with open(seg.path, "ab") as f:
        f.write(garbage)
    seg = Segment(tmp_path, 50, index_interval_bytes=400)
    assert seg.recover() == len(garbage)
    assert seg.size == sum(map(len, batches))
    assert_matches_reference(seg)
    seg.close()


def test_recover_stops_at_a_flipped_byte_in_the_middle(tmp_path, rng):
    seg, batches = _fill(tmp_path, rng)
    victim = 60
    start = sum(map(len, batches[:victim]))
    with open(seg.path, "r+b") as f:   # one flipped bit in the records of batch 60
        f.seek(start + 70)
        byte = f.read(1)[0]
        f.seek(start + 70)
        f.write(bytes([byte ^ 0x10]))
    progress = []
    removed = seg.recover(progress=lambda done, total: progress.append((done, total)),
                          progress_interval=2048)
    assert removed == sum(map(len, batches[victim:]))
    assert seg.size == start
    assert seg.next_offset == struct.unpack_from(">q", batches[victim])[0]
    assert_matches_reference(seg)
    total = start + removed
    assert len(progress) > 3 and all(t == total for _, t in progress)
    assert [d for d, _ in progress] == sorted(d for d, _ in progress)
    assert progress[-1][0] == start
    seg.close()


def test_recover_rejects_offsets_that_go_backwards_and_oversized_batches(tmp_path):
    with open(tmp_path / "00000000000000000000.log", "wb") as f:
        f.write(make_batch(0, 5) + make_batch(5, 5) + make_batch(3, 1) + make_batch(20))
    seg = Segment(tmp_path, 0)
    expected_size = len(make_batch(0, 5) + make_batch(5, 5))
    assert seg.recover() == len(make_batch(3, 1) + make_batch(20))
    assert (seg.size, seg.next_offset) == (expected_size, 10)
    assert seg.recover(max_batch_size=len(make_batch(0, 5)) - 1) == expected_size
    assert (seg.size, seg.next_offset, seg.max_timestamp) == (0, 0, -1)
    seg.close()


def test_recover_of_a_sound_log_changes_nothing(tmp_path, rng):
    seg, batches = _fill(tmp_path, rng)
    before = actual_indexes(seg)
    assert seg.recover(check_records=True) == 0
    assert actual_indexes(seg) == before
    assert log_bytes(seg) == b"".join(batches)
    seg.close()


# ---- index damage and rebuild ---------------------------------------------------------

@pytest.mark.parametrize("victim", [".index", ".timeindex"])
def test_missing_index_is_rebuilt_on_open_or_reported(tmp_path, rng, victim):
    seg, _ = _fill(tmp_path, rng)
    expected = actual_indexes(seg)
    seg.close()
    os.unlink(seg.path[:-4] + victim)
    with pytest.raises(IndexCorruptError, match="missing"):
        Segment(tmp_path, 50, index_interval_bytes=400, rebuild_bad_indexes=False)
    seg = Segment(tmp_path, 50, index_interval_bytes=400)
    assert seg.indexes_rebuilt and "missing" in seg.index_rebuild_reason
    assert actual_indexes(seg) == expected
    assert_matches_reference(seg)
    seg.close()


def _corrupt_last_index_entry(path):
    with open(path, "r+b") as f:
        f.seek(-8, os.SEEK_END)
        f.write(struct.pack(">ii", 3, 17))


def _index_with_partial_entry(path):
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")


def _timeindex_out_of_order(path):
    with open(path, "r+b") as f:
        f.seek(-12, os.SEEK_END)
        f.write(struct.pack(">qi", 5, 0))


@pytest.mark.parametrize("damage, suffix", [
    (_corrupt_last_index_entry, ".index"),
    (_index_with_partial_entry, ".index"),
    (_index_with_partial_entry, ".timeindex"),
    (_timeindex_out_of_order, ".timeindex"),
])
def test_corrupt_index_is_detected_on_open_and_rebuilt(tmp_path, rng, damage, suffix):
    seg, _ = _fill(tmp_path, rng)
    expected = actual_indexes(seg)
    seg.close()
    damage(seg.path[:-4] + suffix)
    with pytest.raises(IndexCorruptError):
        Segment(tmp_path, 50, index_interval_bytes=400, rebuild_bad_indexes=False)
    seg = Segment(tmp_path, 50, index_interval_bytes=400)
    assert seg.indexes_rebuilt
    assert actual_indexes(seg) == expected
    seg.close()


def test_log_shorter_than_its_index_after_a_crash_rebuilds_the_index(tmp_path, rng):
    """The index pages reached the disk but the .log's last pages did not."""
    seg, batches = _fill(tmp_path, rng)
    seg.flush()
    shutil.copytree(tmp_path, tmp_path / "crash", ignore=shutil.ignore_patterns("crash"))
    seg.close()
    os.truncate(tmp_path / "crash" / os.path.basename(seg.path), sum(map(len, batches[:50])))
    seg = Segment(tmp_path / "crash", 50, index_interval_bytes=400)
    assert seg.indexes_rebuilt and not seg.needs_recovery
    assert seg.next_offset == struct.unpack_from(">q", batches[50])[0]
    assert_matches_reference(seg)
    seg.close()


def test_read_with_huge_max_bytes_and_positions(tmp_path):
    seg = Segment(tmp_path, 0)
    batches = [make_batch(i) for i in range(4)]
    seg.append(b"".join(batches))
    assert seg.read(1, 2**63 - 1) == (len(batches[0]), seg.size - len(batches[0]))
    assert seg.read(1, -5) == (len(batches[0]), len(batches[1]))
    assert seg.read(-100, 1) == (0, len(batches[0]))
    assert seg.read(0, 10, 2**62) == (0, len(batches[0]))
    seg.close()


def test_sanity_check_finds_damage_the_open_check_cannot_see(tmp_path, rng):
    seg, _ = _fill(tmp_path, rng)
    expected = actual_indexes(seg)
    assert seg.index_entries > 4
    seg.close()
    with open(seg.index_path, "r+b") as f:   # swap two entries in the middle
        f.seek(8)
        a, b = f.read(8), f.read(8)
        f.seek(8)
        f.write(b + a)
    seg = Segment(tmp_path, 50, index_interval_bytes=400)
    assert not seg.indexes_rebuilt
    assert not seg.sanity_check()
    seg.rebuild_indexes()
    assert seg.sanity_check(deep=True)
    assert actual_indexes(seg) == expected
    seg.close()


# ---- truncation, full indexes, lifecycle ------------------------------------------------

def test_truncate_to_removes_batches_from_the_offset_on(tmp_path, rng):
    seg, _ = _fill(tmp_path, rng, n=150, interval=300)
    infos, _ = ref.scan(log_bytes(seg), 50)
    for target in (infos[120].base_offset, infos[90].base_offset + 1, infos[40].last_offset,
                   infos[5].base_offset):
        keep = [b for b in infos if b.base_offset < target]
        removed = seg.truncate_to(target)
        assert removed == infos[-1].position + infos[-1].size - (keep[-1].position + keep[-1].size)
        infos = keep
        assert seg.next_offset == infos[-1].last_offset + 1
        assert_matches_reference(seg)
    assert seg.truncate_to(seg.next_offset) == 0
    # appends after a truncation index exactly like a fresh segment would
    for b in random_batches(rng, 60, seg.next_offset):
        seg.append(b)
    assert_matches_reference(seg)
    seg.close()
    seg = Segment(tmp_path, 50, index_interval_bytes=300)
    assert not seg.indexes_rebuilt
    assert_matches_reference(seg)
    assert seg.truncate_to(0) == seg.size or seg.size == 0
    assert (seg.size, seg.next_offset, seg.index_entries, seg.timeindex_entries) == (0, 50, 0, 0)
    seg.close()


def test_full_index_stops_indexing_but_appends_and_lookups_still_work(tmp_path):
    seg = Segment(tmp_path, 0, index_interval_bytes=0, max_index_bytes=40)
    batches = [make_batch(i, 1, timestamp=i) for i in range(20)]
    for b in batches[:3]:
        seg.append(b)
    assert not seg.is_index_full()   # 2 of 5 offset entries, 2 of 3 time entries
    for b in batches[3:]:
        seg.append(b)
    assert seg.is_index_full()
    assert (seg.index_entries, seg.timeindex_entries) == (5, 3)
    assert seg.next_offset == 20
    for o in range(20):
        assert seg.position_of(o) == sum(map(len, batches[:o]))
    assert seg.sanity_check(deep=True)
    seg.close()


def test_closed_segment_refuses_io_and_delete_removes_files(tmp_path):
    seg = Segment(tmp_path, 0)
    seg.append(make_batch(0))
    seg.flush()
    seg.close()
    seg.close()  # idempotent
    for call in (lambda: seg.append(make_batch(1)), lambda: seg.read(0, 10),
                 seg.fileno, seg.flush, lambda: seg.position_of(0)):
        with pytest.raises(ValueError, match="closed"):
            call()
    with Segment(tmp_path, 0) as seg2:
        assert seg2.next_offset == 1
    seg2.delete()
    assert os.listdir(tmp_path) == []


def test_flush_from_a_worker_thread_while_appending(tmp_path):
    seg = Segment(tmp_path, 0)
    errors = []

    def flusher():
        try:
            for _ in range(20):
                seg.flush()
        except (OSError, RuntimeError) as exc:  # pragma: no cover - reported below
            errors.append(exc)

    t = threading.Thread(target=flusher)
    t.start()
    for i in range(200):
        seg.append(make_batch(i, 1, value_size=500))
    t.join(timeout=30)
    assert not errors and seg.next_offset == 200
    seg.close()


def test_random_damage_never_crashes_and_recovery_matches_the_reference(tmp_path, rng):
    """Random byte damage to the .log and both indexes: opening, reading, recovering and
    rebuilding never crash, and recovery keeps exactly the CRC-valid prefix."""
    good = b"".join(random_batches(rng, 40, 0))
    for trial in range(60):
        d = tmp_path / str(trial)
        d.mkdir()
        with Segment(d, 0, index_interval_bytes=rng.choice([0, 200, 1000])) as seg:
            seg.append(good)
        files = [d / f"00000000000000000000{s}" for s in (".log", ".index", ".timeindex")]
        for _ in range(rng.randint(1, 4)):
            victim = rng.choice(files)
            data = bytearray(victim.read_bytes())
            action = rng.random()
            if action < 0.5 and data:
                for _ in range(rng.randint(1, 8)):
                    data[rng.randrange(len(data))] = rng.randrange(256)
            elif action < 0.75:
                data += os.urandom(rng.randint(1, 300))
            else:
                del data[rng.randint(0, len(data)):]
            victim.write_bytes(bytes(data))
        seg = Segment(d, 0, index_interval_bytes=200)
        try:
            for o in range(0, seg.next_offset + 2, 5):
                seg.read(o, rng.randint(0, 5000))
                seg.offset_for_timestamp(rng.randint(9000, 12000))
        except CorruptBatchError:
            pass   # a damaged header inside the log is reported, not served
        seg.sanity_check(deep=True)
        damaged = files[0].read_bytes()
        _, valid = ref.scan(damaged, 0, check_crc=True)
        assert seg.recover() == len(damaged) - valid
        assert seg.size == valid == os.path.getsize(files[0])
        assert_matches_reference(seg)
        seg.close()


def test_preallocate_reserves_index_blocks(tmp_path):
    seg = Segment(tmp_path, 0, max_index_bytes=256 * 1024, preallocate=True,
                  index_interval_bytes=0)
    for i in range(10):
        seg.append(make_batch(i, 1, timestamp=i))
    st = os.stat(seg.index_path)
    assert st.st_size == 256 * 1024 and st.st_blocks * 512 >= 256 * 1024
    seg.close()
    assert os.path.getsize(seg.index_path) == 9 * 8
    seg = Segment(tmp_path, 0, max_index_bytes=256 * 1024, preallocate=True,
                  index_interval_bytes=0)
    seg.append(make_batch(10, 1, timestamp=10))       # grows the trimmed file again
    assert os.stat(seg.index_path).st_blocks * 512 >= 256 * 1024
    assert seg.index_entries == 10
    assert_matches_reference(seg)
    seg.close()
