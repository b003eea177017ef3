"""Lining up the tiers' audit counts window by window (pykfk.audit.compare)."""

from __future__ import annotations

from pykfk.audit import AuditEmitter, AuditRecord, compare, window_start

W = 60_000


def _record(tier: str, start: int, count: int, seq: int = 0, topic: str = "orders") -> AuditRecord:
    return AuditRecord(tier, topic, start, W, count, f"{tier}-1", seq)


def test_agreeing_tiers_are_complete_and_short_ones_lost_records() -> None:
    records = [
        _record("producer", 0, 100), _record("mirror", 0, 60, 0), _record("mirror", 0, 40, 1),
        _record("producer", W, 50, 1), _record("mirror", W, 45, 2),
        _record("producer", 2 * W, 10, 2), _record("mirror", 2 * W, 12, 3),
    ]
    report = compare(records, now_ms=10 * W, settle_ms=0)
    assert [w.status for w in report.windows] == ["ok", "loss", "duplicates"]
    assert report.windows[1].missing == {"mirror": 5}
    assert report.windows[2].duplicates == {"mirror": 2}
    assert report.has_loss
    assert report.summary() == {"windows": 3, "windows_complete": 1, "windows_open": 0,
                                "windows_with_loss": 1, "windows_with_duplicates": 1,
                                "missing": 5, "duplicates": 2}


def test_recent_windows_are_open_not_lost() -> None:
    report = compare([_record("producer", 0, 10)], tiers=["mirror"], now_ms=W + 30_000, settle_ms=60_000)
    assert report.windows[0].status == "open" and not report.has_loss
    assert report.windows[0].missing == {"mirror": 10}


def test_counts_add_up_per_window_and_topic() -> None:
    emitter = AuditEmitter("127.0.0.1:1", "producer", window_ms=W, background=False)
    emitter.count_timestamps("orders", [1, W - 1, W, 5 * W + 3])
    emitter.count("payments", 7)
    assert dict(emitter._counts) == {("orders", 0): 2, ("orders", W): 1, ("orders", 5 * W): 1,
                                     ("payments", 0): 1}
    assert window_start(5 * W + 3, W) == 5 * W


def test_audit_records_round_trip_as_json() -> None:
    record = _record("spark-ingest", W, 3, 9)
    assert AuditRecord.decode(record.encode()) == record
    assert record.key == f"spark-ingest/spark-ingest-1/9/orders/{W}"
