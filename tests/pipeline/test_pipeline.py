"""The whole pipeline, every tier with a fault of its own:

idempotent and transactional producers (confluent-kafka; every fourth transaction
aborted) -> a 3-broker ZooKeeper cluster (a partition leader killed with SIGKILL while
they write, started again later) -> ``pykfk-mirror`` exactly once (killed with SIGKILL
twice, the target broker restarted while it runs) -> a standalone broker ->
``pykfk-spark-ingest`` read_committed (killed with SIGKILL mid-run, run again from its
state) -> Parquet.

Then:
- Parquet holds every committed record exactly once and none of the aborted ones;
- ``pykfk audit`` finds the producer, mirror and ingest tiers equal in every window
  (exit 0); after DeleteRecords on the target, a count of what the target still holds
  is reported window by window as loss (exit 1);
- a consumer group that committed on the source, moved to the target with the mirror's
  checkpoints, reads no gap and reads again at most offset.lag.max records per partition.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from pykfk.audit import AuditEmitter
from pykfk.client.admin import AdminClient
from pykfk.mirror.checkpoints import read_checkpoints
from pykfk.mirror.config import load_config
from pykfk.testing import BrokerProcess
from tests.cluster.conftest import Cluster
from tests.mirror.helpers import ROOT, MirrorProcess, read_partition, wait_until, write_config
from tests.spark.spark_helpers import kill_group, start_ingest, wait_for_line

pytestmark = pytest.mark.slow

TOPIC = "events"
REMOTE = "a.events"
PARTITIONS = 3
CHUNKS = 40
PLAIN_PER_CHUNK = 75  # idempotent producer's records per chunk
TXN_RECORDS = 50  # one transaction per chunk
ABORT_EVERY = 4
WINDOW_MS = 1000
OFFSET_LAG_MAX = 100
BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": 0}


class Producers(threading.Thread):
    """Writes CHUNKS chunks, each PLAIN_PER_CHUNK records of an idempotent producer and
    one transaction of TXN_RECORDS (every ABORT_EVERY-th aborted). Records are stamped
    10 ms apart from ``first_ms``; the producer tier's audit counts what was committed."""

    def __init__(self, bootstrap: str, audit: AuditEmitter, first_ms: int):
        super().__init__(daemon=True)
        self.bootstrap, self.audit, self.first_ms = bootstrap, audit, first_ms
        self.committed: list[tuple[bytes, bytes]] = []
        self.aborted: list[tuple[bytes, bytes]] = []
        self.chunks_done = 0
        self.error: BaseException | None = None
        self._n = 0

    def _next(self, tag: str) -> tuple[bytes, bytes, int, int]:
        n, self._n = self._n, self._n + 1
        return f"{tag}-{n}".encode(), f"{tag}:{n}:".encode() + b"x" * 60, n % PARTITIONS, self.first_ms + 10 * n

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _run(self) -> None:
        common = {"bootstrap.servers": self.bootstrap, "linger.ms": 5, "message.timeout.ms": 60000}
        plain = Producer({**common, "enable.idempotence": True})
        txn = Producer({**common, "transactional.id": "pipeline-txn", "transaction.timeout.ms": 60000})
        txn.init_transactions(60)
        failures: list[str] = []

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(str(err))
                return
            self.committed.append((msg.key(), msg.value()))
            self.audit.count(TOPIC, msg.timestamp()[1])

        for chunk in range(CHUNKS):
            for _ in range(PLAIN_PER_CHUNK):
                key, value, partition, ts = self._next("i")
                plain.produce(TOPIC, value, key, partition=partition, timestamp=ts, on_delivery=delivered)
            plain.poll(0)
            records = [self._next("t") for _ in range(TXN_RECORDS)]
            txn.begin_transaction()
            for key, value, partition, ts in records:
                txn.produce(TOPIC, value, key, partition=partition, timestamp=ts)
            if chunk % ABORT_EVERY == ABORT_EVERY - 1 or not _commit(txn):
                if chunk % ABORT_EVERY == ABORT_EVERY - 1:
                    txn.abort_transaction(60)
                self.aborted += [(k, v) for k, v, _, _ in records]
            else:
                self.committed += [(k, v) for k, v, _, _ in records]
                self.audit.count_timestamps(TOPIC, [ts for _, _, _, ts in records])
            self.chunks_done = chunk + 1
            time.sleep(0.1)
        assert plain.flush(60) == 0, "idempotent records left unsent"
        assert not failures, failures[:5]


def _commit(producer: Producer) -> bool:
    """Commit the open transaction; False when the broker made it abort (it is aborted)."""
    for _ in range(10):
        try:
            producer.commit_transaction(60)
            return True
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable():
                continue
            if error.txn_requires_abort():
                producer.abort_transaction(60)
                return False
            raise
    raise AssertionError("commit_transaction kept failing")


def _committed_ends(target: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": target, "group.id": "ends", "isolation.level": "read_committed"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(REMOTE, p), timeout=10)[1] for p in range(PARTITIONS)]
    except Exception:  # noqa: BLE001 - the remote topic may not exist yet, the target may be restarting
        return [0] * PARTITIONS
    finally:
        consumer.close()


def _values(bootstrap: str, topic: str) -> list[bytes | None]:
    return [r.value for p in range(PARTITIONS) for r in read_partition(bootstrap, topic, p)]


def _audit(bootstrap: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "pykfk.cli.main", "-b", bootstrap, "audit", "--settle", "0",
                           "-o", "json", *args], check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    out = json.loads(done.stdout) if done.stdout.strip().startswith("{") else {"stderr": done.stderr}
    return done.returncode, out


def _fail_over(config: Path, source: str, target: str) -> None:
    """Group billing commits half way into each source partition, is moved to the target
    with the mirror's checkpoints, and reads from where the target puts it."""
    group = "billing"
    records = {p: read_partition(source, TOPIC, p) for p in range(PARTITIONS)}
    committed = {p: records[p][len(records[p]) // 2].offset for p in range(PARTITIONS)}
    consumer = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in committed.items()], asynchronous=False)
    consumer.close()
    settings = load_config(str(config))

    def checkpointed() -> bool:
        found = read_checkpoints(settings.target.client("consumer"), settings.checkpoints_topic)
        return all(found.get((group, TOPIC, p)) is not None and found[(group, TOPIC, p)].upstream_offset == o
                   for p, o in committed.items())

    wait_until(checkpointed, 30, "checkpoints of every partition", interval=0.5)
    done = subprocess.run([sys.executable, "-m", "pykfk.mirror", "failover", str(config), "--group", group,
                           "--execute", "-o", "json"], check=False, capture_output=True, text=True, timeout=60,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    applied = {row["partition"]: row["downstream_offset"] for row in json.loads(done.stdout)}
    for p, upstream in committed.items():
        index = {r.value: r.offset for r in records[p]}
        read = [index[r.value] for r in read_partition(target, REMOTE, p, start=applied[p])]
        assert {o for o in index.values() if o >= upstream} <= set(read), f"gap in partition {p}"
        again = sum(1 for offset in read if offset < upstream)
        assert again <= OFFSET_LAG_MAX, (p, upstream, again)


@pytest.mark.timeout(300)
def test_producers_to_parquet_through_crashes(zookeeper_server: Any, tmp_path: Path) -> None:
    cluster = Cluster(str(tmp_path / "cluster"), zookeeper_server, 3,
                      {**BROKER_SETTINGS, "transaction.state.log.replication.factor": 3,
                       "transaction.state.log.min.isr": 2, "transaction.state.log.num.partitions": 3})
    target_broker = BrokerProcess(str(tmp_path / "target"), BROKER_SETTINGS, log_level="WARNING")
    mirror: MirrorProcess | None = None
    try:
        cluster.start()
        target_broker.start()
        source, target = cluster.bootstrap, target_broker.bootstrap
        cluster.create_topic(TOPIC, PARTITIONS, 3, **{"min.insync.replicas": 2})
        config = write_config(tmp_path / "a-b.yaml", ("a", source), ("b", target), topics=TOPIC,
                              offset_lag_max=OFFSET_LAG_MAX, progress_max_records=800,
                              audit_bootstrap_servers=target, audit_window_ms=WINDOW_MS,
                              **{"target.reconnect.backoff.max.ms": 1000})
        mirror = MirrorProcess(config, "m", "--set", "group.instance.id=m1").start()

        producer_audit = AuditEmitter(target, "producer", window_ms=WINDOW_MS, background=False)
        first_ms = int(time.time() * 1000) - 120_000
        producers = Producers(source, producer_audit, first_ms)
        producers.start()

        # A partition leader dies with kill -9 while the producers write; back later.
        wait_until(lambda: producers.chunks_done >= CHUNKS // 4, 60, "a quarter of the chunks")
        leader = cluster.brokers[cluster.leader(TOPIC, 0)]
        leader.kill()
        # The mirror dies twice, each time after committing copies of every partition.
        for copied in (800, 2000):
            wait_until(lambda c=copied: min(_committed_ends(target)) >= c // PARTITIONS, 90, f"{copied} copied")
            mirror.kill9()
            mirror.start()
            if leader.proc is not None and leader.proc.poll() is not None:
                leader.start(timeout=60)
        producers.join(120)
        assert not producers.is_alive() and producers.error is None, producers.error
        assert producers.aborted, "no transaction was aborted"
        producer_audit.close()
        if not leader.is_running():
            leader.start(timeout=60)

        # The target broker restarts under the running mirror.
        target_broker.stop()
        time.sleep(2)
        target_broker.start()

        expected = Counter(v for _, v in producers.committed)
        try:
            wait_until(lambda: Counter(_values(target, REMOTE)) == expected, 90,
                       "the target to hold every committed record once", interval=1)
        except AssertionError:
            held = Counter(_values(target, REMOTE))
            aborted = {v for _, v in producers.aborted}
            raise AssertionError(f"target: {len(expected - held)} committed records missing, "
                                 f"{sum((held - expected).values())} extra ({len(set(held) & aborted)} aborted); "
                                 f"the mirror said:\n{mirror.tail()}") from None
        _fail_over(config, source, target)
        assert mirror.alive(), mirror.tail()
        assert mirror.stop() == 0, mirror.tail()
        assert "Traceback" not in mirror.log.read_text(errors="replace"), mirror.tail()

        # Ingestion, killed mid-run, then run again from what it left.
        output = str(tmp_path / "lake")
        extra = ["--max-records-per-partition", "500", "--audit-bootstrap-servers", target,
                 "--audit-window-ms", str(WINDOW_MS), "--audit-as", f"{REMOTE}={TOPIC}"]
        job = start_ingest(target, output, [REMOTE], extra)
        wait_for_line(job, "run 1: loading", 120)
        kill_group(job)
        job = start_ingest(target, output, [REMOTE], extra)
        out, _ = job.communicate(timeout=180)
        assert job.returncode == 0, out[-3000:]

        table = ds.dataset(output, format="parquet", partitioning="hive").to_table(columns=["key", "value"])
        rows = Counter(zip(table.column("key").to_pylist(), table.column("value").to_pylist()))
        assert rows == Counter(producers.committed), "Parquet is not the committed records once each"
        assert not set(rows) & set(producers.aborted)

        code, report = _audit(target)
        assert code == 0, report
        assert set(report["tiers"]) >= {"mirror", "spark-ingest"}, report["tiers"]
        summary = report["summary"]
        assert summary["windows"] >= 30 and summary["windows_complete"] == summary["windows"], summary
        for window in report["windows"]:
            assert len(set(window["counts"].values())) == 1, window

        # Records deleted on the target: a count of what it still holds shows the loss.
        kept_from = 300
        gone = read_partition(target, REMOTE, 0)
        gone = [r for r in gone if r.offset < kept_from]
        with AdminClient(target) as admin:
            assert admin.delete_records(REMOTE, {0: kept_from}) == {0: kept_from}
        recount = AuditEmitter(target, "target-after-trim", window_ms=WINDOW_MS, background=False)
        for p in range(PARTITIONS):
            start = kept_from if p == 0 else 0
            recount.count_timestamps(TOPIC, [r.timestamp for r in read_partition(target, REMOTE, p, start=start)])
        recount.close()
        code, report = _audit(target, "--tier", "target-after-trim")
        assert code == 1, report
        lost = Counter(r.timestamp - r.timestamp % WINDOW_MS for r in gone)
        missing = {w["window_start"]: w["missing"]["target-after-trim"] for w in report["windows"] if w["missing"]}
        assert missing == dict(lost)
        assert report["summary"]["missing"] == len(gone)
    finally:
        if mirror is not None and mirror.alive():
            mirror.proc.kill()  # type: ignore[union-attr]
        target_broker.stop()
        cluster.close()
