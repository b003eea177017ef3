"""A tailing reader's next read starts where its last one ended, with no file read, and
that remembered position never outlives a change of the segment list."""

from __future__ import annotations

import os
import threading

from pykfk._core import records
from pykfk.log import Log, LogConfig

from .helpers import batch, region_bytes


def _thread_reads() -> int:
    """read system calls (pread included) made by this thread so far."""
    with open(f"/proc/self/task/{threading.get_native_id()}/io") as f:
        for line in f:
            if line.startswith("syscr:"):
                return int(line.split()[1])
    raise AssertionError("no syscr in /proc io")


def _reads_of(fn):
    # Reading the /proc file itself costs read system calls: measured around nothing.
    before = _thread_reads()
    own = _thread_reads() - before
    before = _thread_reads()
    result = fn()
    return result, _thread_reads() - before - own


def _offsets(data) -> list[int]:
    return [r.offset for r in records.iter_records(region_bytes(data))]


def _values(data) -> list[bytes]:
    return [r.value for r in records.iter_records(region_bytes(data))]


def test_a_tailing_read_costs_no_file_read_and_one_at_the_end_costs_none(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    for _ in range(50):
        log.append(batch(3))
    offset = 0
    data = log.read(offset, 1 << 20)
    offset = _offsets(data)[-1] + 1
    assert offset == log.log_end_offset
    # At the log end: nothing to read and no read.
    data, reads = _reads_of(lambda: log.read(offset, 1 << 20))
    assert data.file_region is None and reads == 0
    for round_ in range(5):
        log.append(batch(2, value=b"r%d" % round_))
        data, reads = _reads_of(lambda at=offset: log.read(at, 1 << 20))
        assert reads == 0
        assert _offsets(data) == [offset, offset + 1]
        assert _values(data) == [b"r%d-0" % round_, b"r%d-1" % round_]
        offset += 2
    # A reader elsewhere in the log still reads the index and headers, and is right.
    data = log.read(10, 1 << 20)
    assert _offsets(data)[0] <= 10 <= _offsets(data)[-1]


def test_the_position_is_forgotten_on_truncation(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    for _ in range(4):
        log.append(batch(5, value=b"a"))
    log.read(0, 1 << 20)  # remembers offset 20 at the end of the file
    # A follower truncates to 10 and takes batches of another shape: the old end position
    # now falls inside a batch.
    log.truncate_to(10)
    log.append(batch(1, value=b"b"), assign_offsets=True)
    log.append(batch(13, value=b"c"))
    data = log.read(20, 1 << 20)
    assert _offsets(data)[0] <= 20 <= _offsets(data)[-1]
    assert _values(data)[0].startswith(b"c")


def test_the_position_is_forgotten_on_full_truncation_and_roll(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append(batch(4))
    log.read(0, 1 << 20)  # offset 4 at the end of segment 0
    log.roll()
    log.append(batch(3, value=b"n"))
    data = log.read(4, 1 << 20)
    assert _offsets(data) == [4, 5, 6] and _values(data)[0] == b"n-0"
    assert region_bytes(data) == region_bytes(log.read(4, 1 << 20))
    log.read(4, 1 << 20)  # offset 7 remembered
    log.truncate_fully_and_start_at(7)
    log.append(batch(2, value=b"f"))
    data = log.read(7, 1 << 20)
    assert _offsets(data) == [7, 8] and _values(data) == [b"f-0", b"f-1"]
    assert data.file_region.position == 0


def test_the_position_is_forgotten_when_segments_are_deleted(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig(file_delete_delay_ms=0))
    log.append(batch(4))
    log.read(0, 1 << 20)  # offset 4 remembered in segment 0
    log.roll()
    log.append(batch(2, value=b"d"))
    log.advance_log_start_offset(4)
    assert log.delete_retained_segments() == 1
    data = log.read(4, 1 << 20)
    assert _offsets(data) == [4, 5] and _values(data) == [b"d-0", b"d-1"]


def test_the_read_limit_below_the_end_is_kept_and_the_rest_read_later(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    for _ in range(3):
        log.append(batch(2, value=b"x" * 3000))  # batches larger than a header read
    data = log.read(0, 1 << 20, max_offset=4)  # a high watermark behind the log end
    assert _offsets(data) == [0, 1, 2, 3]
    data, reads = _reads_of(lambda: log.read(4, 1 << 20))
    assert _offsets(data) == [4, 5] and reads == 0
    # A small max_bytes past the remembered position goes the usual way: whole batches.
    for _ in range(3):
        log.append(batch(2))
    first = log.read(6, 1)
    assert _offsets(first) == [6, 7]
    assert os.path.exists(log.dir)
