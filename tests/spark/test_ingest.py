"""pykfk-spark-ingest: topic -> Parquet by event date/hour, exactly once when runs are
killed (SIGKILL of the whole process group, JVM included) and re-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from spark_helpers import create_topic, kill_group, produce, start_ingest, wait_for_line

from pykfk_spark.ingest import (
    CRASH_ENV,
    PREPARED,
    STAGING_DIR,
    IngestConfig,
    committed_runs,
    read_manifest,
    run_ingest,
)

pytestmark = pytest.mark.slow  # a Spark session, broker processes, seconds per test

TOPIC = "ingest"
PARTITIONS = 4
# 2024-03-01 22:30 UTC, one record every 1.5 s: 10000 offsets span midnight and 5 hours.
T0 = int(datetime(2024, 3, 1, 22, 30, tzinfo=timezone.utc).timestamp() * 1000)
STEP_MS = 1500

def records_for(partition: int, first: int, n: int) -> list[tuple]:
    return [
        (b"%d:%d" % (partition, off), b"payload-%d-%d" % (partition, off), T0 + STEP_MS * off, None)
        for off in range(first, first + n)
    ]


def start_job(bootstrap: str, output: str, **env: str) -> subprocess.Popen:
    return start_ingest(bootstrap, output, [TOPIC], ["--max-records-per-partition", "2500"], **env)


def loaded_rows(output: str) -> Any:
    """Every committed row, with the date/hour of the directory it sits in."""
    dataset = ds.dataset(output, format="parquet", partitioning="hive")  # skips _staging, _offsets
    return dataset.to_table(
        columns=["partition", "offset", "key", "value", "timestamp", "date", "hour"]
    )


def test_killed_runs_then_rerun_load_every_record_exactly_once(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    produce(broker.bootstrap, TOPIC, records_for, range(PARTITIONS), 10_000)
    output = str(tmp_path / "lake")

    # 1. Killed while its Spark job runs: nothing may become visible.
    job = start_job(broker.bootstrap, output)
    wait_for_line(job, "run 1: loading 40000 offsets", 180)
    wait_for_line(job, "loading: ", 120)  # tasks are running
    kill_group(job)
    assert committed_runs(output) == []
    assert not os.path.exists(os.path.join(output, STAGING_DIR, "000001", PREPARED))
    assert not any(Path(output).glob("date=*/hour=*/*.parquet"))

    # 2. Killed half way through moving its files into place, after preparing its manifest.
    job = start_job(broker.bootstrap, output, **{CRASH_ENV: "mid-commit"})
    out, _ = job.communicate(timeout=300)
    kill_group(job)
    assert job.returncode == -signal.SIGKILL, out
    assert "run 1: discarding its unfinished output" in out, out  # what the first kill left
    assert committed_runs(output) == []
    prepared = os.path.join(output, STAGING_DIR, "000001", PREPARED)
    assert os.path.exists(prepared)
    with open(prepared, encoding="utf-8") as f:
        staged = json.load(f)
    moved = [name for name in staged["files"] if os.path.exists(os.path.join(output, name))]
    assert 0 < len(moved) < len(staged["files"])

    # 3. More records arrive; the next run finishes run 1's commit, then loads only them.
    produce(broker.bootstrap, TOPIC, records_for, range(PARTITIONS), 2_000, first_offset=10_000)
    lines: list[str] = []
    config = IngestConfig(
        bootstrap_servers=broker.bootstrap,
        output=output,
        topics=[TOPIC],
        max_records_per_partition=2500,
    )
    summary = run_ingest(spark, config, lines.append)
    assert summary.recovered == [1]
    assert summary.run == 2
    assert summary.records == PARTITIONS * 2_000
    assert {tp: (p.start, p.end, p.records) for tp, p in summary.partitions.items()} == {
        (TOPIC, p): (10_000, 12_000, 2_000) for p in range(PARTITIONS)
    }
    assert summary.bytes == sum(
        len(k) + len(v) for p in range(PARTITIONS) for k, v, _, _ in records_for(p, 10_000, 2_000)
    )
    assert "total: 8000 records" in summary.format()

    # The two committed runs chain: run 2 starts where run 1 ended.
    assert committed_runs(output) == [1, 2]
    first, second = read_manifest(output, 1), read_manifest(output, 2)
    assert first["start"] == {TOPIC: {str(p): 0 for p in range(PARTITIONS)}}
    assert first["end"] == second["start"] == {TOPIC: {str(p): 10_000 for p in range(PARTITIONS)}}
    assert second["end"] == {TOPIC: {str(p): 12_000 for p in range(PARTITIONS)}}
    assert first["records"] == PARTITIONS * 10_000

    # Every offset of every partition exactly once, in the right date/hour directory.
    table = loaded_rows(output)
    assert table.num_rows == PARTITIONS * 12_000
    seen = sorted(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    assert seen == [(p, o) for p in range(PARTITIONS) for o in range(12_000)]
    for row in table.take(list(range(0, table.num_rows, 97))).to_pylist():
        p, o = row["partition"], row["offset"]
        assert (row["key"], row["value"]) == (b"%d:%d" % (p, o), b"payload-%d-%d" % (p, o))
        stamp = row["timestamp"]
        assert round(stamp.timestamp() * 1000) == T0 + STEP_MS * o
        assert str(row["date"]) == stamp.strftime("%Y-%m-%d") and int(row["hour"]) == stamp.hour
    dates = {str(d) for d in table.column("date").to_pylist()}
    assert dates == {"2024-03-01", "2024-03-02"}

    # 4. Nothing new: nothing loaded, nothing committed.
    assert run_ingest(spark, config, lines.append).run is None
    assert committed_runs(output) == [1, 2]
