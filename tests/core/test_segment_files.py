"""File descriptors of segments: one per active segment, an LRU of them for sealed ones,
pins that keep a send's descriptor open, index mappings that hold none."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from pykfk._core.segment import (
    Segment,
    open_sealed_segments,
    open_sealed_segments_limit,
    set_open_sealed_segments_limit,
)
from tests.core.test_segment import log_bytes, make_batch


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def lru_limit() -> Iterator[None]:
    saved = open_sealed_segments_limit()
    yield
    set_open_sealed_segments_limit(saved)


def filled_segment(directory, base: int, batches: int = 4) -> Segment:
    seg = Segment(directory, base, index_interval_bytes=1)
    for i in range(batches):
        seg.append(make_batch(base + 2 * i, 2))
    return seg


def test_an_active_segment_with_index_entries_holds_one_descriptor(tmp_path):
    dirs = [tmp_path / f"p{i}" for i in range(20)]
    for d in dirs:
        d.mkdir()
    before = open_fds()
    segments = [filled_segment(d, 0) for d in dirs]
    assert all(s.index_entries > 0 and s.timeindex_entries > 0 for s in segments)
    assert open_fds() - before == 20
    for seg in segments:
        assert seg.index_lookup(5)[0] == 5        # lookups read the mapping, no fd needed
        seg.close()
    assert open_fds() == before


def test_sealed_segments_beyond_the_limit_close_their_log_and_reopen_on_use(tmp_path, lru_limit):
    set_open_sealed_segments_limit(2)
    before = open_fds()
    segments = [filled_segment(tmp_path, base) for base in (0, 100, 200, 300, 400)]
    expected = [log_bytes(s) for s in segments]
    for seg in segments:
        seg.seal()
    assert open_sealed_segments() == 2
    assert open_fds() - before == 2
    assert [s.holds_fd for s in segments] == [False, False, False, True, True]
    # every segment still answers, each use reopening it and closing the least recent
    for seg, data in zip(segments, expected):
        assert seg.read(seg.base_offset, 1 << 20) == (0, len(data))
        assert os.pread(seg.fileno(), len(data), 0) == data
        assert seg.offset_for_timestamp(0) == seg.base_offset
        assert open_fds() - before <= 2
    for seg in segments:
        seg.close()
    assert open_fds() == before and open_sealed_segments() == 0


def test_a_pinned_descriptor_survives_eviction_and_close_until_unpinned(tmp_path, lru_limit):
    set_open_sealed_segments_limit(1)
    first, second = filled_segment(tmp_path, 0), filled_segment(tmp_path, 100)
    data = log_bytes(first)
    first.seal()
    fd = first.pin()
    second.seal()                   # over the limit, but the pinned one stays open
    assert first.holds_fd
    first.close()                   # e.g. deleted by retention during a send
    assert os.pread(fd, len(data), 0) == data
    first.unpin()
    with pytest.raises(OSError):
        os.fstat(fd)
    second.close()


def test_appending_to_a_sealed_segment_unseals_it(tmp_path, lru_limit):
    set_open_sealed_segments_limit(1)
    seg = filled_segment(tmp_path, 0)
    seg.seal()
    assert seg.sealed and os.path.getsize(seg.index_path) == 8 * seg.index_entries
    seg.append(make_batch(8, 2))
    assert not seg.sealed and open_sealed_segments() == 0
    other = filled_segment(tmp_path, 100)
    other.seal()
    assert seg.holds_fd             # unsealed: not the LRU's to close
    assert seg.sanity_check(deep=True)
    seg.close()
    other.close()


def test_a_sealed_segment_renamed_away_while_evicted_reads_as_closed(tmp_path, lru_limit):
    set_open_sealed_segments_limit(1)
    gone, kept = filled_segment(tmp_path, 0), filled_segment(tmp_path, 100)
    gone.seal()
    kept.seal()
    assert not gone.holds_fd
    os.rename(gone.path, gone.path + ".deleted")
    with pytest.raises(ValueError, match="removed segment"):
        gone.read(0, 100)
    gone.close()                    # nothing to trim or create under the old names
    assert not os.path.exists(gone.path) and not os.path.exists(gone.index_path + "x")
    kept.close()


def test_index_entries_written_through_the_mapping_survive_a_reopen(tmp_path):
    seg = filled_segment(tmp_path, 0, batches=50)
    entries = [seg.index_entry(i) for i in range(seg.index_entries)]
    times = [seg.timeindex_entry(i) for i in range(seg.timeindex_entries)]
    seg.flush()
    seg.close()
    with Segment(tmp_path, 0, index_interval_bytes=1) as again:
        assert not again.indexes_rebuilt
        assert [again.index_entry(i) for i in range(again.index_entries)] == entries
        assert [again.timeindex_entry(i) for i in range(again.timeindex_entries)] == times


def test_unpin_without_pin_is_an_error(tmp_path):
    with filled_segment(tmp_path, 0) as seg, pytest.raises(RuntimeError, match="without pin"):
        seg.unpin()


def mapping_flags(path: str) -> list[str]:
    """VmFlags of this process's mapping of ``path`` (/proc/self/smaps), [] when unmapped."""
    with open("/proc/self/smaps", encoding="utf-8") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if line.endswith(" " + path):
            for following in lines[i + 1:]:
                if following.startswith("VmFlags:"):
                    return following.split()[1:]
    return []


def test_only_index_mappings_that_reach_into_holes_read_no_pages_ahead(tmp_path):
    # An active segment's indexes are mapped at their full size, mostly holes: a fault
    # there must read in its own page only ("rr", random access), not megabytes of zeros.
    seg = filled_segment(tmp_path, 0)
    entries = seg.index_entries
    assert entries > 0 and os.path.getsize(seg.index_path) == seg.max_index_bytes
    assert "rr" in mapping_flags(seg.index_path) and "rr" in mapping_flags(seg.timeindex_path)
    seg.flush()
    seg.close()
    # Reopened, as after a crash: the file still has its holes, and the advice again.
    with open(tmp_path / "00000000000000000000.index", "r+b") as f:
        f.truncate(seg.max_index_bytes)
    again = Segment(tmp_path, 0, index_interval_bytes=1)
    assert not again.indexes_rebuilt and again.index_entries == entries
    assert "rr" in mapping_flags(again.index_path)
    # Sealed: trimmed to its entries, which are worth reading ahead.
    again.seal()
    assert mapping_flags(again.index_path) and "rr" not in mapping_flags(again.index_path)
    again.close()


def mapped_index_files() -> set[str]:
    with open("/proc/self/maps", encoding="utf-8") as f:
        return {line.split()[-1] for line in f if line.rstrip().endswith((".index", ".timeindex"))}


def test_sealed_segments_beyond_the_limit_unmap_their_indexes_the_active_one_never(tmp_path, lru_limit):
    set_open_sealed_segments_limit(2)
    sealed = [filled_segment(tmp_path, base, batches=20) for base in range(0, 1000, 100)]
    entries = [[s.index_entry(i) for i in range(s.index_entries)] for s in sealed]
    for seg in sealed:
        seg.seal()
    active = filled_segment(tmp_path, 5000)
    active_files = {active.index_path, active.timeindex_path}
    assert mapped_index_files() == active_files | {
        p for s in sealed[-2:] for p in (s.index_path, s.timeindex_path)}
    # A reader going through every sealed segment: each remaps its indexes at its use,
    # the least recently used are unmapped again, the active segment's stay.
    for _ in range(2):
        for seg, expected in zip(sealed, entries):
            assert [seg.index_entry(i) for i in range(seg.index_entries)] == expected
            assert seg.read(seg.base_offset + 21, 1 << 20)[0] == seg.index_lookup(seg.base_offset + 21)[1]
            mapped = mapped_index_files()
            assert active_files <= mapped and {seg.index_path, seg.timeindex_path} <= mapped
            assert len(mapped) == 2 + 2 * 2
            active.append(make_batch(active.next_offset, 2))
    assert active.sanity_check(deep=True) and all(s.sanity_check(deep=True) for s in sealed)
    for seg in [*sealed, active]:
        seg.close()
    assert mapped_index_files() == set()
