"""kafka.isolation.level on a topic written by confluent-kafka's transactional producers:
committed and aborted transactions of two producers interleaved in each partition, plain
records between them, transaction markers at the end of the log. read_uncommitted gets
the aborted records, read_committed never does, and the offset ranges read stay
contiguous across the offsets markers and aborted batches occupy, in a batch read, a
streaming query across two triggers on one checkpoint, and pykfk-spark-ingest (killed
after its commit and run again), whose audit then agrees with its Parquet output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from spark_helpers import create_topic, start_ingest

from pykfk.audit import AuditEmitter
from pykfk_spark.client import OffsetClient
from pykfk_spark.ingest import CRASH_ENV, IngestConfig, committed_runs, read_manifest, run_ingest

pytestmark = pytest.mark.slow  # a Spark session, broker processes, seconds per test

PARTITIONS = 3
TIMEOUT_S = 60
WINDOW_MS = 1000


@dataclass
class Written:
    """What the producers wrote to a topic: values by fate, each value's partition and
    timestamp, and how many transaction markers each partition holds."""

    bootstrap: str
    topic: str
    committed: set[bytes] = field(default_factory=set)
    aborted: set[bytes] = field(default_factory=set)
    open: set[bytes] = field(default_factory=set)
    partition_of: dict[bytes, int] = field(default_factory=dict)
    timestamp_of: dict[bytes, int] = field(default_factory=dict)
    markers: Counter = field(default_factory=Counter)
    clock: int = 0


class Writer:
    """confluent-kafka producers on one topic, recording every value's fate in Written.
    Values: <tag>-<n>, each spread over the partitions (n % PARTITIONS), stamped 10 ms
    apart from ten minutes ago, so their audit windows are closed."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap = bootstrap
        self.written = Written(bootstrap, topic, clock=(int(time.time()) - 600) * 1000)
        self.plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        self.producers: dict[str, Producer] = {}
        self.touched: dict[str, set[int]] = {}

    def transactional(self, name: str) -> Producer:
        if name not in self.producers:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": f"{self.written.topic}-{name}",
                    "linger.ms": 0,
                }
            )
            producer.init_transactions(TIMEOUT_S)
            self.producers[name] = producer
        return self.producers[name]

    def send(self, producer: Producer, tag: str, count: int) -> list[bytes]:
        values = []
        for n in range(count):
            value, partition = b"%s-%d" % (tag.encode(), n), n % PARTITIONS
            self.written.clock += 10
            producer.produce(
                self.written.topic, value, partition=partition, timestamp=self.written.clock
            )
            self.written.partition_of[value] = partition
            self.written.timestamp_of[value] = self.written.clock
            values.append(value)
        producer.flush(TIMEOUT_S)  # in the log before the next producer writes
        return values

    def begin(self, name: str, tag: str, count: int) -> None:
        producer = self.transactional(name)
        if name not in self.touched:
            producer.begin_transaction()
            self.touched[name] = set()
        values = self.send(producer, tag, count)
        self.touched[name] |= {self.written.partition_of[v] for v in values}
        self.written.open |= set(values)

    def end(self, name: str, commit: bool) -> None:
        producer = self.producers[name]
        (producer.commit_transaction if commit else producer.abort_transaction)(TIMEOUT_S)
        for partition in self.touched.pop(name):
            self.written.markers[partition] += 1
        mine = {
            v for v in self.written.open if v.startswith(f"{self.written.topic}:{name}".encode())
        }
        self.written.open -= mine
        (self.written.committed if commit else self.written.aborted).update(mine)

    def plain_records(self, tag: str, count: int) -> None:
        self.written.committed |= set(self.send(self.plain, tag, count))

    def history(self, round_no: int) -> None:
        """Two producers interleaved: A's aborted transaction spans B's committed one
        and plain records; A then commits one and aborts one, so the log ends with
        markers."""
        t = self.written.topic
        self.begin("a", f"{t}:a:aborted{round_no}", 30)
        self.begin("b", f"{t}:b:committed{round_no}", 30)
        self.plain_records(f"{t}:plain{round_no}", 30)
        self.begin("a", f"{t}:a:aborted{round_no}x", 30)
        self.end("a", commit=False)
        self.end("b", commit=True)
        self.begin("a", f"{t}:a:committed{round_no}", 15)
        self.end("a", commit=True)
        self.begin("a", f"{t}:a:aborted{round_no}y", 12)
        self.end("a", commit=False)

    def close(self) -> None:
        """Flush and let the producers go (they would keep calling a stopped broker)."""
        for producer in [self.plain, *self.producers.values()]:
            producer.flush(TIMEOUT_S)
        self.producers.clear()
        self.plain = None  # type: ignore[assignment]


def log_ends(bootstrap: str, topic: str, *, stable: bool = False) -> dict[int, int]:
    """Each partition's high watermark, or with ``stable`` its last stable offset."""
    with OffsetClient(bootstrap, read_committed=stable) as client:
        latest = client.latest([(topic, p) for p in range(PARTITIONS)])
    return {p: latest[(topic, p)] for (_, p) in latest}


def rows(df: DataFrame) -> list[tuple[int, int, bytes]]:
    return sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())


def check_contiguous(
    written: Written, uncommitted: list[tuple[int, int, bytes]], committed: list[tuple[int, int, bytes]]
) -> None:
    """Every offset of each partition is a record read_uncommitted returns or one of its
    markers; read_committed returns exactly those records less the aborted ones."""
    ends = log_ends(written.bootstrap, written.topic)
    for p in range(PARTITIONS):
        offsets = [o for (q, o, _) in uncommitted if q == p]
        assert len(set(offsets)) == len(offsets)
        assert len(offsets) + written.markers[p] == ends[p], (p, len(offsets), ends[p])
        assert all(0 <= o < ends[p] for o in offsets)
    assert [r for r in uncommitted if r[2] not in written.aborted] == committed


def transactional_topic(bootstrap: str, topic: str) -> Writer:
    create_topic(bootstrap, topic, PARTITIONS)
    return Writer(bootstrap, topic)


def read(spark: SparkSession, bootstrap: str, topic: str, level: str, **options: str) -> DataFrame:
    reader = (
        spark.read.format("pykfk")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", level)
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_batch_read_both_isolation_levels(spark: SparkSession, broker: Any) -> None:
    writer = transactional_topic(broker.bootstrap, "txn-batch")
    writer.history(1)
    writer.close()
    written = writer.written
    assert len(written.aborted) == 72 and len(written.committed) == 75

    uncommitted = rows(read(spark, broker.bootstrap, written.topic, "read_uncommitted"))
    committed = rows(read(spark, broker.bootstrap, written.topic, "read_committed"))
    assert {v for _, _, v in uncommitted} == written.committed | written.aborted
    assert {v for _, _, v in committed} == written.committed
    check_contiguous(written, uncommitted, committed)
    # The default is read_uncommitted, as Spark's Kafka source.
    assert rows(read(spark, broker.bootstrap, written.topic, "read_uncommitted")) == rows(
        spark.read.format("pykfk")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", written.topic)
        .load()
    )
    # Ranges cut inside transactions (4 offsets a task) drop the same records.
    assert rows(read(spark, broker.bootstrap, written.topic, "read_committed",
                     maxRecordsPerPartition="4")) == committed


def _checkpointed_offsets(checkpoint: str) -> list[dict[str, dict[str, int]]]:
    """The source offsets of each micro-batch in the checkpoint, in order."""
    directory = os.path.join(checkpoint, "offsets")
    batches = sorted(int(n) for n in os.listdir(directory) if n.isdigit())
    out = []
    for n in batches:
        with open(os.path.join(directory, str(n)), encoding="utf-8") as f:
            out.append(json.loads(f.read().strip().splitlines()[-1]))
    return out


def test_stream_across_two_triggers_stops_at_the_open_transaction(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    writer = transactional_topic(broker.bootstrap, "txn-stream")
    written = writer.written
    topic = written.topic
    outputs = {level: str(tmp_path / level) for level in ("read_committed", "read_uncommitted")}

    def trigger(level: str) -> None:
        query = (
            spark.readStream.format("pykfk")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", level)
            .load()
            .writeStream.format("parquet")
            .option("path", outputs[level])
            .option("checkpointLocation", outputs[level] + "-checkpoint")
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180)
        assert query.exception() is None

    def values(level: str) -> set[bytes]:
        return {bytes(r.value) for r in spark.read.parquet(outputs[level]).select("value").collect()}

    # Trigger 1: one transaction still open, plain records after it.
    writer.history(1)
    writer.begin("c", f"{topic}:c:open", 9)
    writer.plain_records(f"{topic}:after-open", 6)
    stable = log_ends(broker.bootstrap, topic, stable=True)
    for level in outputs:
        trigger(level)
    after_open = {v for v in written.committed if b":after-open-" in v}
    assert values("read_committed") == written.committed - after_open
    assert values("read_uncommitted") == written.committed | written.aborted | written.open

    # Trigger 2 on the same checkpoints: the transaction commits, more history follows.
    writer.end("c", commit=True)
    writer.history(2)
    writer.close()
    for level in outputs:
        trigger(level)
    assert values("read_committed") == written.committed
    assert values("read_uncommitted") == written.committed | written.aborted
    committed_rows = rows(spark.read.parquet(outputs["read_committed"]))
    uncommitted_rows = rows(spark.read.parquet(outputs["read_uncommitted"]))
    check_contiguous(written, uncommitted_rows, committed_rows)

    # The committed query's first batch ended at each partition's open transaction, the
    # second began there and ended at the log end, past the markers closing the log.
    ends = log_ends(broker.bootstrap, topic)
    first, second = _checkpointed_offsets(outputs["read_committed"] + "-checkpoint")
    open_at = {
        p: min(o for q, o, v in uncommitted_rows if q == p and b":c:open-" in v)
        for p in range(PARTITIONS)
    }
    assert stable == open_at
    assert first == {topic: {str(p): open_at[p] for p in range(PARTITIONS)}}
    assert second == {topic: {str(p): ends[p] for p in range(PARTITIONS)}}
    assert _checkpointed_offsets(outputs["read_uncommitted"] + "-checkpoint")[-1] == second


# ------------------------------------------------------------------ ingest and audit


def _audit(bootstrap: str, *args: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "pykfk.cli.main", "-b", bootstrap, "--timeout", "5", "audit", *args],
        check=False, capture_output=True, text=True, timeout=120,
    )
    return result.returncode, result.stdout, result.stderr


def _reference_counts(bootstrap: str, written: Written, values: set[bytes], audit_topic: str) -> None:
    """The producers' audit tier: what they committed, per window of its timestamps."""
    emitter = AuditEmitter(bootstrap, "producer", topic=audit_topic, window_ms=WINDOW_MS,
                           background=False)
    emitter.count_timestamps(written.topic, [written.timestamp_of[v] for v in values])
    emitter.close()


def test_ingest_read_committed_killed_after_commit_then_audit_agrees(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    bootstrap = broker.bootstrap
    audit_topic = "txn-ingest-audit"
    writer = transactional_topic(bootstrap, "txn-ingest")
    written = writer.written
    writer.history(1)
    output = str(tmp_path / "lake")
    audit_args = ["--audit-topic", audit_topic, "--settle", "0"]

    # Exit codes a user meets before the pipeline has published anything.
    code, _, err = _audit(bootstrap, *audit_args)
    missing = (f"Error: nothing to compare: the audit topic {audit_topic} does not exist on "
               f"{bootstrap} (no tier has published counts there yet)")
    assert (code, err.strip()) == (3, missing)
    code, _, err = _audit(bootstrap, "--settle", "soon")
    assert code == 2 and "Invalid value for '--settle'" in err
    code, _, err = _audit("127.0.0.1:1", *audit_args)
    assert code == 3 and err.startswith("Error: cannot reach the cluster")
    _reference_counts(bootstrap, written, set(written.committed), audit_topic)
    code, _, err = _audit(bootstrap, *audit_args)
    assert code == 3 and "only the reference tier 'producer' has published counts" in err, err

    # Run 1 is killed (SIGKILL) right after its commit, before publishing its counts.
    extra = ["--audit-bootstrap-servers", bootstrap, "--audit-topic", audit_topic,
             "--audit-window-ms", str(WINDOW_MS)]
    job = start_ingest(bootstrap, output, [written.topic], extra, **{CRASH_ENV: "after-commit"})
    out, _ = job.communicate(timeout=300)
    assert job.returncode == -signal.SIGKILL, out
    assert committed_runs(output) == [1]
    assert read_manifest(output, 1)["isolation_level"] == "read_committed"
    code, _, err = _audit(bootstrap, *audit_args)
    assert code == 3 and "only the reference tier" in err  # run 1's counts are not out yet

    # More transactions; the next run publishes run 1's counts, then loads and counts its own.
    before = set(written.committed)
    writer.history(2)
    writer.close()
    _reference_counts(bootstrap, written, written.committed - before, audit_topic)
    config = IngestConfig(bootstrap_servers=bootstrap, output=output, topics=[written.topic],
                          audit_bootstrap_servers=bootstrap, audit_topic=audit_topic,
                          audit_window_ms=WINDOW_MS)
    lines: list[str] = []
    summary = run_ingest(spark, config, lines.append)
    assert summary.run == 2
    assert "run 1: audit counts published" in "\n".join(lines)

    # Parquet: every committed record once, no aborted one; the runs' ranges chain and
    # end at the log end, past the markers that close it.
    table = ds.dataset(output, format="parquet", partitioning="hive").to_table(
        columns=["partition", "offset", "value"]
    )
    loaded = [bytes(v) for v in table.column("value").to_pylist()]
    assert sorted(loaded) == sorted(written.committed)
    first, second = read_manifest(output, 1), read_manifest(output, 2)
    ends = log_ends(bootstrap, written.topic)
    assert first["end"] == second["start"]
    assert second["end"] == {written.topic: {str(p): ends[p] for p in range(PARTITIONS)}}
    assert first["records"] + second["records"] == len(written.committed)

    code, stdout, err = _audit(bootstrap, *audit_args, "-o", "json")
    assert code == 0, (stdout, err)
    report = json.loads(stdout)
    assert report["tiers"] == ["spark-ingest"]
    assert report["summary"]["windows_complete"] == report["summary"]["windows"] > 1
    assert sum(w["counts"]["spark-ingest"] for w in report["windows"]) == len(written.committed)

    # Killed after publishing run 2's counts but before marking them: published again
    # under the same keys, counted once.
    os.unlink(os.path.join(output, "_offsets", "000002.audited"))
    lines.clear()
    assert run_ingest(spark, config, lines.append).run is None
    assert "run 2: audit counts published" in "\n".join(lines)
    code, stdout, err = _audit(bootstrap, *audit_args, "-o", "json")
    assert code == 0, (stdout, err)
    assert json.loads(stdout)["summary"] == report["summary"]

    # A tier counting one record twice is reported: exit 1, one line saying so.
    some = next(iter(written.committed))
    extra_count = AuditEmitter(bootstrap, "spark-ingest", topic=audit_topic, window_ms=WINDOW_MS,
                               background=False)
    extra_count.count(written.topic, written.timestamp_of[some])
    extra_count.close()
    code, _, err = _audit(bootstrap, *audit_args)
    assert code == 1
    assert err.strip() == "Error: 0 records missing in 0 windows, 1 duplicates in 1 windows"


def test_audit_of_a_topic_holding_other_records_gives_no_verdict(broker: Any) -> None:
    create_topic(broker.bootstrap, "not-audit", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("not-audit", b'{"tier": "producer"}', partition=0)
    producer.flush(TIMEOUT_S)
    code, stdout, err = _audit(broker.bootstrap, "--audit-topic", "not-audit")
    assert (code, stdout) == (3, "")
    assert err.strip() == ("Error: nothing to compare: the audit topic not-audit holds a record "
                           "that is not an audit count (KeyError: 'topic')")


def test_ingest_switched_to_read_committed_waits_for_an_open_transaction(
    spark: SparkSession, broker: Any, tmp_path: Path
) -> None:
    """Run 1 read_uncommitted ends partition 0 past a transaction still open; run 2
    read_committed loads the other partitions and leaves partition 0 where it was."""
    writer = transactional_topic(broker.bootstrap, "txn-switch")
    written = writer.written
    writer.plain_records(f"{written.topic}:before", 6)
    writer.begin("a", f"{written.topic}:a:open", 1)  # partition 0 only
    writer.plain_records(f"{written.topic}:after", 6)
    config = IngestConfig(bootstrap_servers=broker.bootstrap, output=str(tmp_path / "lake"),
                          topics=[written.topic], isolation_level="read_uncommitted")
    first = run_ingest(spark, config, lambda _line: None)
    assert first.records == 13
    writer.plain_records(f"{written.topic}:later", 6)
    config.isolation_level = "read_committed"
    second = run_ingest(spark, config, lambda _line: None)
    assert {tp[1]: p.records for tp, p in second.partitions.items()} == {1: 2, 2: 2}
    manifest = read_manifest(config.output, 2)
    assert manifest["start"][written.topic]["0"] == manifest["end"][written.topic]["0"] == 5
    writer.end("a", commit=False)
    writer.close()
