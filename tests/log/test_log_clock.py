"""The log reads time only from its injected clock (pykfk.clock): with a ManualClock the
append time of LogAppendTime topics, segment.ms rolls of a segment without timestamps'
help, flush.ms and the delete delay of removed segments all follow that clock, not the
machine's."""

from __future__ import annotations

from pathlib import Path

from pykfk._core import records
from pykfk.clock import ManualClock
from pykfk.log.config import LogConfig
from pykfk.log.log import Log

START_MS = 1_500_000_000_000  # years before the machine's clock


def _batch(value: bytes, timestamp: int = START_MS) -> bytearray:
    return bytearray(records.build_batch([(b"k", value, timestamp, [])]))


def test_log_append_time_and_segment_age_follow_the_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=START_MS)
    config = LogConfig(message_timestamp_type="LogAppendTime", segment_ms=60_000, flush_interval_ms=5_000)
    log = Log(str(tmp_path / "t-0"), config, clock=clock)
    try:
        info = log.append(_batch(b"a"))
        assert info.log_append_time_ms == START_MS
        assert not log.flush_due()  # flushed at open, as of the clock
        clock.advance(5_000)
        assert log.flush_due()
        clock.advance(55_001)  # the active segment is older than segment.ms by this clock
        info = log.append(_batch(b"b"))
        assert info.log_append_time_ms == START_MS + 60_001
        assert [s.base_offset for s in log.segments] == [0, 1]
    finally:
        log.close()


def test_removed_segments_wait_out_the_delete_delay_by_the_clock(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=START_MS)
    config = LogConfig(segment_bytes=200, retention_ms=1_000, file_delete_delay_ms=30_000)
    log = Log(str(tmp_path / "t-0"), config, clock=clock)
    try:
        for i in range(4):
            log.append(_batch(b"x" * 120, START_MS + i))
        assert len(log.segments) == 4
        clock.advance(10_000)  # every record older than retention.ms by the clock
        assert log.delete_retained_segments() == 3
        assert log.pending_deletes == 3 and log.sweep_deleted_segments() == 0
        clock.advance(30_000)
        assert log.sweep_deleted_segments() == 3
    finally:
        log.close()
