"""Recovery after an unclean stop: a killed writer, torn and corrupt tails, lost indexes."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys

import pytest

from pykfk._core import records
from pykfk.log import Log, LogConfig

from .helpers import batch, read_records

ONE = len(batch(1, value=b"0"))  # size of the batches written here
WRITTEN = len(records.build_batch([(None, b"0", 1_000_000, [])]))  # ... and by WRITER

# A writer that appends `count` single-record batches, flushes after the tenth, prints the
# log end offset and is killed with SIGKILL: no close, no snapshot, no index trim.
WRITER = """
import os, signal, sys
from pykfk._core import records
from pykfk.log import Log, LogConfig
directory, segment_bytes, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
log = Log(directory, LogConfig(segment_bytes=segment_bytes, index_interval_bytes=100))
for i in range(count):
    log.append(bytearray(records.build_batch([(None, b"%d" % (i % 10), 1_000_000 + i, [])])))
    if i == 9:
        log.flush()
print(log.log_end_offset, log.recovery_point, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def killed_writer(directory, count=40, segment_bytes=ONE * 8):
    proc = subprocess.run([sys.executable, "-c", WRITER, str(directory), str(segment_bytes),
                           str(count)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    end, recovery_point = map(int, proc.stdout.split())
    assert (end, recovery_point) == (count, 10)
    return sorted(directory.glob("*.log"))


def reopen(directory, **kw):
    return Log(str(directory), LogConfig(segment_bytes=ONE * 8, index_interval_bytes=100), **kw)


def expected(count):
    return [(i, b"%d-0" % (i % 10)) for i in range(count)]


def values(log):
    return [(o, v) for o, v in read_records(log)]


def test_killed_writer_loses_nothing_it_wrote(tmp_path, caplog):
    d = tmp_path / "t-0"
    killed_writer(d)
    with caplog.at_level(logging.INFO, logger="pykfk.log"):
        log = reopen(d, recovery_point=10)
    assert log.log_end_offset == 40
    assert values(log) == [(i, b"%d" % (i % 10)) for i in range(40)]
    assert all(seg.sanity_check(deep=True) for seg in log.segments)
    text = caplog.text
    assert "Recovering 4 unflushed segments" in text  # segment 8 holds offset 10, then 16..
    assert "Recovered segment 32 (4/4 segments, 100%" in text
    assert log.append(batch(1)).first_offset == 40


def test_torn_tail_is_truncated_and_earlier_data_kept(tmp_path, caplog):
    d = tmp_path / "t-0"
    last = killed_writer(d)[-1]
    with open(last, "r+b") as f:
        f.truncate(os.path.getsize(last) - 5)  # the last batch lost its end
    with caplog.at_level(logging.WARNING, logger="pykfk.log"):
        log = reopen(d)
    assert log.log_end_offset == 39
    assert [o for o, _ in values(log)] == list(range(39))
    assert f"Truncated {WRITTEN - 5} bytes" in caplog.text
    assert log.append(batch(1, value=b"after")).first_offset == 39
    assert values(log)[-1] == (39, b"after-0")
    log.close()
    assert reopen(d, clean_shutdown=True).log_end_offset == 40


def test_garbage_after_the_last_batch_is_cut(tmp_path):
    d = tmp_path / "t-0"
    last = killed_writer(d)[-1]
    size = os.path.getsize(last)
    with open(last, "ab") as f:
        f.write(b"\x00" * 100 + os.urandom(300))  # preallocation or a torn write
    log = reopen(d)
    assert log.log_end_offset == 40
    assert os.path.getsize(last) == size


def test_corrupt_batch_in_an_older_segment_truncates_there_and_drops_later_segments(tmp_path):
    d = tmp_path / "t-0"
    logs = killed_writer(d)
    victim = logs[2]  # base offset 16
    with open(victim, "r+b") as f:
        f.seek(4 * WRITTEN - 2)  # inside the value of the fourth batch: CRC mismatch
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    log = reopen(d, recovery_point=10)
    assert log.log_end_offset == 19
    assert [s.base_offset for s in log.segments] == [0, 8, 16]
    assert [o for o, _ in values(log)] == list(range(19))
    assert sorted(p.name for p in d.glob("*.log")) == [p.name for p in logs[:3]]


def test_clean_shutdown_skips_recovery(tmp_path, caplog):
    d = tmp_path / "t-0"
    log = reopen(d)
    for i in range(30):
        log.append(batch(1, timestamp=1000 + i))
    log.close()
    with caplog.at_level(logging.INFO, logger="pykfk.log"):
        log = reopen(d, clean_shutdown=True)
    assert "Recover" not in caplog.text
    assert log.log_end_offset == 30


def test_deleting_index_files_is_harmless(tmp_path, caplog):
    d = tmp_path / "t-0"
    log = reopen(d)
    for i in range(30):
        log.append(batch(1, timestamp=1000 + 10 * i, value=b"%d" % i))
    before = [(s.base_offset, s.index_entries, s.timeindex_entries) for s in log.segments]
    log.close()
    for p in list(d.glob("*.index")) + list(d.glob("*.timeindex")):
        p.unlink()
    with caplog.at_level(logging.WARNING, logger="pykfk.log"):
        log = reopen(d, clean_shutdown=True)
    assert "Rebuilt the indexes" in caplog.text
    assert [(s.base_offset, s.index_entries, s.timeindex_entries) for s in log.segments] == before
    assert any(entries for _, entries, _ in before)
    assert [v for _, v in values(log)] == [b"%d-0" % i for i in range(30)]
    assert log.offset_for_timestamp(1000 + 10 * 17) == 17
    assert log.read(13, 1).file_region.size == len(batch(1, value=b"13"))


def test_garbage_index_is_rebuilt(tmp_path):
    d = tmp_path / "t-0"
    log = reopen(d)
    for _ in range(30):
        log.append(batch(1))
    log.close()
    for p in d.glob("*.index"):
        p.write_bytes(os.urandom(64))
    log = reopen(d, clean_shutdown=True)
    assert all(seg.sanity_check(deep=True) for seg in log.segments)
    assert [o for o, _ in values(log)] == list(range(30))


@pytest.mark.parametrize("cut", [1, 30, ONE - 1])
def test_unflushed_single_segment_with_torn_batch(tmp_path, cut):
    d = tmp_path / "t-0"
    log = reopen(d)
    for _ in range(3):
        log.append(batch(1))
    path = log.active_segment.path
    log.flush()
    del log
    with open(path, "r+b") as f:
        f.truncate(3 * ONE - cut)
    log = reopen(d)
    assert log.log_end_offset == 2
    assert log.append(batch(1)).first_offset == 2


def test_large_recoveries_report_progress_inside_segments(tmp_path, caplog, monkeypatch):
    import pykfk.log.log as log_module

    d = tmp_path / "t-0"
    killed_writer(d)
    monkeypatch.setattr(log_module, "RECOVERY_PROGRESS_BYTES", 1)  # treat this log as large
    with caplog.at_level(logging.INFO, logger="pykfk.log"):
        reopen(d)
    percentages = [int(r.getMessage().split("Recovery ")[1].split("%")[0])
                   for r in caplog.records if "Recovery " in r.getMessage()]
    assert percentages and percentages == sorted(percentages) and percentages[-1] < 100
