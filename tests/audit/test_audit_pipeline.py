"""The audit trail end to end: pykfk's Producer writes to one cluster, the mirror copies
to another, Spark ingestion loads the copy into Parquet; every tier publishes its counts
and ``pykfk audit`` compares them. Then records are deleted from the copy
(DeleteRecords) before a second ingestion, and the audit names the windows they were in."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pykfk.audit import AuditEmitter
from pykfk.client.admin import AdminClient
from pykfk.producer import Producer
from pykfk.testing import wait_until
from pykfk_spark.ingest import IngestConfig, run_ingest
from tests.mirror.helpers import (
    ROOT,
    MirrorProcess,
    create_topic,
    read_partition,
    total_records,
    write_config,
)

WINDOW_MS = 1000
RECORDS = 3000
PARTITIONS = 3


def _audit(bootstrap: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "pykfk.cli.main", "-b", bootstrap, "audit", "--settle", "0",
                             "-o", "json", *args], check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def _ingest(spark: Any, source: str, output: Path, audit: str, tier: str) -> None:
    config = IngestConfig(bootstrap_servers=source, output=str(output), topics=["east.orders"],
                          audit_bootstrap_servers=audit, audit_tier=tier, audit_window_ms=WINDOW_MS,
                          audit_names={"east.orders": "orders"})
    run_ingest(spark, config, progress=lambda _line: None)


@pytest.mark.timeout(300)
def test_tiers_agree_then_deleted_records_are_reported(spark: Any, standalone_factory: Any, tmp_path: Path) -> None:
    east, west = standalone_factory("east").bootstrap, standalone_factory("west").bootstrap
    create_topic(east, "orders", PARTITIONS)

    # Tier 1: the producer, records stamped over ~15 past one-second windows.
    emitter = AuditEmitter(east, "producer", window_ms=WINDOW_MS, interval_s=0.5)
    began = int(time.time() * 1000) - 30_000
    with Producer(east, audit=emitter, linger_ms=1) as producer:
        for i in range(RECORDS):
            producer.send("orders", b"v%d" % i, key=b"k%d" % i, timestamp=began + i * 5)
    emitter.close()

    # Tier 2: the mirror into the other cluster.
    config = write_config(tmp_path / "m.yaml", ("east", east), ("west", west), topics="orders",
                          audit_bootstrap_servers=east, audit_window_ms=WINDOW_MS, audit_interval_ms=500)
    mirror = MirrorProcess(config).start()
    try:
        wait_until(lambda: total_records(west, "east.orders", PARTITIONS) >= RECORDS, 60, "the copy")
    finally:
        assert mirror.stop() == 0, mirror.tail()

    # Tier 3: Spark ingestion of the copy.
    _ingest(spark, west, tmp_path / "lake", east, "spark-ingest")
    code, report = _audit(east)
    assert code == 0, report
    assert report["tiers"] == ["mirror", "spark-ingest"]
    assert report["summary"]["windows_with_loss"] == 0 and report["summary"]["windows_with_duplicates"] == 0
    assert report["summary"]["windows_complete"] == report["summary"]["windows"] >= 14
    for window in report["windows"]:
        assert len(set(window["counts"].values())) == 1, window
    assert sum(w["counts"]["spark-ingest"] for w in report["windows"]) == RECORDS

    # DeleteRecords on the copy, then a fresh ingestion of what is left.
    trimmed = read_partition(west, "east.orders", 0)[:400]
    lost = Counter(r.timestamp - r.timestamp % WINDOW_MS for r in trimmed)
    with AdminClient(west) as admin:
        assert admin.delete_records("east.orders", {0: 400}) == {0: 400}
    _ingest(spark, west, tmp_path / "lake-after-trim", east, "spark-after-trim")
    code, report = _audit(east, "--tier", "spark-after-trim")
    assert code == 1
    missing = {w["window_start"]: w["missing"]["spark-after-trim"] for w in report["windows"] if w["missing"]}
    assert missing == dict(lost)
    assert report["summary"]["missing"] == 400 and report["summary"]["windows_with_loss"] == len(lost)

    table = subprocess.run([sys.executable, "-m", "pykfk.cli.main", "-b", east, "audit", "--settle", "0",
                            "--tier", "spark-after-trim"], check=False, capture_output=True, text=True,
                           timeout=120, cwd=ROOT)
    assert table.returncode == 1
    assert "loss" in table.stdout and "spark-after-trim 400" not in table.stdout
    assert "400 records missing" in table.stdout
