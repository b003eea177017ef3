"""max.compaction.lag.ms (KIP-354) on real files: a log whose dirty part is small enough
that its ratio never calls for cleaning is cleaned once its oldest dirty record is older
than the lag, and a compacted log rolls its active segment within the lag."""

from __future__ import annotations

from pykfk._core import records
from pykfk.log.cleaner import LogCleaner
from pykfk.log.log import Log
from tests.log.test_cleaner import NOW, compacted, consume, put

LAG_MS = 60_000


def test_a_log_past_its_max_compaction_lag_is_cleaned_whatever_its_ratio(tmp_path):
    log = Log(str(tmp_path / "t-0"), compacted(segment_bytes=100_000, min_cleanable_dirty_ratio=0.9,
                                              max_compaction_lag_ms=LAG_MS))
    try:
        for i in range(200):
            put(log, [(f"k{i}".encode(), b"v" * 50)])
        log.roll()
        cleaner = LogCleaner()
        assert cleaner.clean_log(log, NOW) is not None  # all dirty: ratio 1.0
        put(log, [(b"k1", b"newer")])
        put(log, [(b"k2", b"newer")])
        log.roll()
        assert len(consume(log)) == 202
        # A small dirty tail: below the ratio, and not yet past the lag.
        assert cleaner.clean_log(log, NOW + LAG_MS // 2) is None
        assert cleaner.clean_logs([log], NOW + LAG_MS // 2) == []
        # Past the lag (the batches carry NOW as their timestamp): cleaned.
        assert len(cleaner.clean_logs([log], NOW + LAG_MS + 1)) == 1
        values = {key: value for _offset, key, value in consume(log)}
        assert len(consume(log)) == 200 and values[b"k1"] == values[b"k2"] == b"newer"
    finally:
        log.close()


def test_a_compacted_log_rolls_within_the_lag(tmp_path):
    log = Log(str(tmp_path / "t-0"), compacted(segment_bytes=100_000, max_compaction_lag_ms=LAG_MS))
    try:
        put(log, [(b"a", b"1")])
        log.append(bytearray(_batch(b"a", b"2", NOW + LAG_MS + 1)))
        assert len(log.segments) == 2  # rolled: the first batch is older than the lag
        plain = Log(str(tmp_path / "p-0"), compacted(segment_bytes=100_000))
        try:
            put(plain, [(b"a", b"1")])
            plain.append(bytearray(_batch(b"a", b"2", NOW + LAG_MS + 1)))
            assert len(plain.segments) == 1  # segment.ms (a week) decides alone
        finally:
            plain.close()
    finally:
        log.close()


def _batch(key: bytes, value: bytes, timestamp: int) -> bytes:
    return records.build_batch([(key, value, timestamp, [])])
