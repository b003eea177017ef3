"""Retention by time and size: whole old segments go, readers of them are not hurt."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from pykfk._core import records
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log import Log, LogConfig
from pykfk.log.retention import deletable_segments

from .helpers import batch, read_records, region_bytes

HOUR = 3_600_000
T0 = 1_700_000_000_000


@dataclass
class Facts:
    base_offset: int
    size: int
    max_timestamp: int


def segs(*specs):
    return [Facts(base, size, ts) for base, size, ts in specs]


def test_rules_on_segment_facts():
    s = segs((0, 100, T0), (10, 100, T0 + HOUR), (20, 100, T0 + 2 * HOUR), (30, 50, T0 + 3 * HOUR))
    by_time = LogConfig(retention_ms=HOUR, retention_bytes=-1)
    kw = {"high_watermark": 40, "log_start_offset": 0}
    assert deletable_segments(s, by_time, now_ms=T0 + HOUR, **kw) == (0, "")
    assert deletable_segments(s, by_time, now_ms=T0 + HOUR + 1, **kw) == (1, "retention.ms")
    # Never the active (last) segment, however old.
    assert deletable_segments(s, by_time, now_ms=T0 + 100 * HOUR, **kw) == (3, "retention.ms")
    by_size = LogConfig(retention_ms=-1, retention_bytes=200)
    assert deletable_segments(s, by_size, now_ms=T0, **kw) == (1, "retention.bytes")
    assert deletable_segments(s, LogConfig(retention_ms=-1, retention_bytes=0),
                              now_ms=T0, **kw) == (3, "retention.bytes")
    # Nothing at or past the high watermark goes.
    assert deletable_segments(s, by_time, now_ms=T0 + 100 * HOUR, high_watermark=15,
                              log_start_offset=0) == (1, "retention.ms")
    # A log start offset past whole segments deletes them even without retention.
    keep_all = LogConfig(retention_ms=-1, retention_bytes=-1)
    assert deletable_segments(s, keep_all, now_ms=T0, high_watermark=40,
                              log_start_offset=25) == (2, "log start offset")
    compact = LogConfig(retention_ms=1, cleanup_policy="compact")
    assert deletable_segments(s, compact, now_ms=T0 + 100 * HOUR, **kw) == (0, "")


def test_segment_without_timestamps_ages_by_file_time():
    s = segs((0, 10, -1), (5, 10, -1))
    cfg = LogConfig(retention_ms=HOUR)
    assert deletable_segments(s, cfg, now_ms=T0 + 2 * HOUR, high_watermark=9, log_start_offset=0,
                              mtime_ms=lambda seg: T0) == (1, "retention.ms")
    assert deletable_segments(s, cfg, now_ms=T0 + 2 * HOUR, high_watermark=9, log_start_offset=0,
                              mtime_ms=lambda seg: T0 + 2 * HOUR) == (0, "")


def filled_log(tmp_path, **config):
    one = len(batch(1))
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=2 * one, **config))
    for i in range(10):  # five segments of two batches, timestamps one hour apart
        log.append(batch(1, timestamp=T0 + i * HOUR, value=b"%d" % i))
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6, 8]
    return log


def deleted_files(tmp_path):
    return sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted"))


def test_retention_by_time_keeps_a_reader_of_a_deleted_segment_working(tmp_path):
    log = filled_log(tmp_path, retention_ms=3 * HOUR, file_delete_delay_ms=60_000)
    held = log.read(0, 1 << 20)  # a fetch in flight on the oldest segment
    held_bytes = region_bytes(held)
    now = T0 + 6 * HOUR + 1  # newest batches: segment 0 at 1 h, segment 2 at 3 h
    assert log.delete_retained_segments(now) == 2
    assert log.log_start_offset == 4
    assert [s.base_offset for s in log.segments] == [4, 6, 8]
    with pytest.raises(KafkaError) as err:
        log.read(3, 1000)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert read_records(log)[0] == (4, b"4-0")
    # Renamed, not yet removed: the descriptor the reader holds still gives the same bytes.
    assert deleted_files(tmp_path) == [
        "00000000000000000000.index.deleted", "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted", "00000000000000000002.index.deleted",
        "00000000000000000002.log.deleted", "00000000000000000002.timeindex.deleted"]
    assert region_bytes(held) == held_bytes
    assert [r.value for r in records.iter_records(held_bytes)] == [b"0-0", b"1-0"]
    assert log.sweep_deleted_segments(now) == 0  # the delay is wall-clock time
    assert log.sweep_deleted_segments(force=True) == 2
    assert deleted_files(tmp_path) == []


def test_retention_by_size(tmp_path):
    log = filled_log(tmp_path, retention_ms=-1, file_delete_delay_ms=0)
    one_segment = log.segments[0].size
    log.update_config(LogConfig(segment_bytes=log.config.segment_bytes, retention_ms=-1,
                                retention_bytes=3 * one_segment, file_delete_delay_ms=0))
    assert log.delete_retained_segments() == 2
    assert log.size_bytes == 3 * one_segment and log.log_start_offset == 4
    assert deleted_files(tmp_path) == []  # no delay: gone at once


def test_retention_never_deletes_the_active_segment_or_unreplicated_data(tmp_path):
    log = filled_log(tmp_path, retention_ms=1, file_delete_delay_ms=0)
    log.high_watermark = 5
    assert log.delete_retained_segments(T0 + 100 * HOUR) == 2  # segment 4 holds offset 5
    log.high_watermark = None
    assert log.delete_retained_segments(T0 + 100 * HOUR) == 2
    assert [s.base_offset for s in log.segments] == [8]
    assert log.delete_retained_segments(T0 + 100 * HOUR) == 0


def test_deleted_segments_are_not_resurrected_by_a_restart(tmp_path):
    log = filled_log(tmp_path, retention_ms=3 * HOUR, file_delete_delay_ms=60_000)
    log.delete_retained_segments(T0 + 6 * HOUR + 1)
    log.flush()
    del log  # crash before the delayed delete
    assert deleted_files(tmp_path)
    log = Log(str(tmp_path / "t-0"), LogConfig(), log_start_offset=4)
    assert deleted_files(tmp_path) == []
    assert (log.log_start_offset, log.log_end_offset) == (4, 10)
    assert not os.path.exists(tmp_path / "t-0" / "00000000000000000000.log")


def test_delete_records_style_log_start_offset(tmp_path):
    log = filled_log(tmp_path, retention_ms=-1, file_delete_delay_ms=0)
    log.advance_log_start_offset(5)
    with pytest.raises(KafkaError):
        log.read(4, 100)
    assert read_records(log)[0][0] == 5
    assert log.delete_retained_segments() == 2  # segments 0 and 2 lie wholly below 5
    assert log.log_start_offset == 5
