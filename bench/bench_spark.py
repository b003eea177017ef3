"""The pykfk Spark batch reader feeding ``df.write.parquet``, against pykfk's own consumer
reading the same records in one process.

    python -m pytest bench/bench_spark.py -s                       # 1M records of 200 bytes
    python -m pytest bench/bench_spark.py --benchmark-disable      # quick pass, 100k (CI)
    python bench/bench_spark.py [--quick]

Setup: a broker process on loopback, one topic of 8 partitions holding N records (12-byte
key + 188 random bytes of value, so Parquet cannot dictionary-encode them away), Spark
``local[2]``. Figures (best of the timed runs, after a warm-up query):

- spark -> parquet: ``spark.read.format("pykfk")...load().write.parquet(dir)`` (snappy);
- spark -> noop: the same read into Spark's ``noop`` sink (what the source costs);
- consumer, messages: ``SimpleConsumer.multifetch`` over all partitions, taking every
  ``Message``'s value (what an application consuming them does);
- consumer, decode only: the same fetches, counting the decoded records.

The ratio printed is spark->parquet rows/s over consumer-messages rows/s.

Isolation levels (``-k isolation``): a second topic of the same size and shape written
by confluent-kafka's transactional producer, transactions of 5,000 records (625 a
partition), every tenth aborted, read into ``noop`` with ``kafka.isolation.level``
read_uncommitted (every record) and read_committed (aborted ones dropped, markers
skipped), in alternation; figures are offsets covered per second, the ratio
read_committed over read_uncommitted. The plain topic is read both ways too (no transaction: read_committed
takes the same path).

The machine has 2 cores shared with other work: read ratios from one run, not absolute
numbers.
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

PARTITIONS = 8
KEY_BYTES = 12
VALUE_BYTES = 188
FULL_RECORDS = 1_000_000
QUICK_RECORDS = 100_000
TOPIC = "bench-spark"
TXN_TOPIC = "bench-spark-txn"
TXN_RECORDS = 5_000  # per transaction, spread over the partitions
ABORT_EVERY = 10  # every tenth transaction is aborted


def _expose_package() -> None:
    """Spark workers import pykfk_spark by name: map spark/ to it when pykfk is not
    installed with it (see spark/PACKAGING.txt)."""
    if importlib.util.find_spec("pykfk_spark") is not None:
        return
    shim = tempfile.mkdtemp(prefix="pykfk-spark-path-")
    atexit.register(shutil.rmtree, shim, True)
    os.symlink(Path(__file__).resolve().parents[1] / "spark", os.path.join(shim, "pykfk_spark"))
    sys.path.insert(0, shim)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (shim, os.environ.get("PYTHONPATH")) if p)


def _produce(bootstrap: str, total: int) -> None:
    from pykfk._core.records import build_batch
    from pykfk.client.connection import BrokerConnection

    host, _, port = bootstrap.rpartition(":")
    rng = random.Random(7)
    per_partition = total // PARTITIONS
    # ~420 KB batches: under the broker's message.max.bytes (Kafka's default, ~1 MiB)
    batch_records = 2000
    with BrokerConnection(host, int(port)).connect() as conn:
        body = {
            "topics": [
                {
                    "name": TOPIC,
                    "num_partitions": PARTITIONS,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 10000,
        }
        assert conn.request(19, body).topics[0].error_code == 0
        pending = []
        now = int(time.time() * 1000)
        for start in range(0, per_partition, batch_records):
            n = min(batch_records, per_partition - start)
            data = []
            for p in range(PARTITIONS):
                blob = rng.randbytes(VALUE_BYTES * n)
                recs = [
                    (
                        b"key-%08d" % (start + i),
                        blob[i * VALUE_BYTES : (i + 1) * VALUE_BYTES],
                        now,
                        None,
                    )
                    for i in range(n)
                ]
                data.append({"index": p, "records": build_batch(recs)})
            produce = {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 30000,
                "topic_data": [{"name": TOPIC, "partition_data": data}],
            }
            pending.append(conn.send(0, produce, version=7))
            while len(pending) > 3:
                _check(conn.receive(pending.pop(0)))
        for entry in pending:
            _check(conn.receive(entry))


def _produce_transactions(bootstrap: str, total: int) -> int:
    """``total`` records in transactions of TXN_RECORDS, every ABORT_EVERY-th aborted;
    returns how many were aborted."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TXN_TOPIC, PARTITIONS, 1)]).values():
        future.result(60)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": "bench-spark-txn",
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    producer.init_transactions(60)
    blob = random.Random(7).randbytes(VALUE_BYTES * 4096)
    aborted = 0
    for txn, start in enumerate(range(0, total, TXN_RECORDS)):
        n = min(TXN_RECORDS, total - start)
        producer.begin_transaction()
        for i in range(start, start + n):
            at = (i % 4096) * VALUE_BYTES
            producer.produce(
                TXN_TOPIC, blob[at : at + VALUE_BYTES], b"key-%08d" % i, partition=i % PARTITIONS
            )
            if i % 100_000 == 0:
                producer.poll(0)
        if txn % ABORT_EVERY == ABORT_EVERY - 1:
            producer.flush(60)  # in the log, then aborted
            producer.abort_transaction(60)
            aborted += n
        else:
            producer.commit_transaction(60)
    producer.flush(60)
    return aborted


def _check(response: Any) -> None:
    for topic in response.responses:
        for part in topic.partition_responses:
            assert part.error_code == 0, part


class Setup:
    def __init__(self, records: int, runs: int, workdir: str):
        from pyspark.sql import SparkSession

        from pykfk.testing import BrokerProcess

        self.records = records
        self.runs = runs
        self.workdir = workdir
        self.broker = BrokerProcess(os.path.join(workdir, "broker")).start()
        _produce(self.broker.bootstrap, records)
        self.aborted = _produce_transactions(self.broker.bootstrap, records)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        self.spark = (
            SparkSession.builder.master("local[2]")
            .appName("pykfk-bench-spark")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.local.dir", os.path.join(workdir, "spark-local"))
            .config("spark.sql.warehouse.dir", os.path.join(workdir, "warehouse"))
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        self.spark.sparkContext.setLogLevel("ERROR")
        import pykfk_spark

        pykfk_spark.register(self.spark)

    def reader(self, topic: str = TOPIC, **options: str) -> Any:
        r = (
            self.spark.read.format("pykfk")
            .option("kafka.bootstrap.servers", self.broker.bootstrap)
            .option("subscribe", topic)
        )
        for k, v in options.items():
            r = r.option(k, v)
        return r.load()

    def close(self) -> None:
        self.spark.stop()
        self.broker.stop()


def best_of(runs: int, fn: Callable[[int], int]) -> tuple[float, int]:
    """(best seconds, records seen); ``fn(run)`` does one run and returns its count."""
    best, seen = float("inf"), 0
    for run in range(runs):
        t0 = time.perf_counter()
        seen = fn(run)
        best = min(best, time.perf_counter() - t0)
    return best, seen


def spark_to_parquet(setup: Setup) -> tuple[float, int]:
    best, written = float("inf"), 0
    for i in range(setup.runs):
        out = os.path.join(setup.workdir, f"parquet-{i}")
        t0 = time.perf_counter()
        setup.reader().write.mode("overwrite").parquet(out)
        best = min(best, time.perf_counter() - t0)
        written = setup.spark.read.parquet(out).count()  # checked, not timed
        shutil.rmtree(out)
    return best, written


def spark_to_noop(setup: Setup) -> tuple[float, int]:
    def run(_: int) -> int:
        setup.reader().write.format("noop").mode("overwrite").save()
        return setup.records

    return best_of(setup.runs, run)


def consumer_read(setup: Setup, take_messages: bool) -> tuple[float, int]:
    from pykfk.consumer import FetchRequest, SimpleConsumer

    def run(_: int) -> int:
        seen = 0
        with SimpleConsumer(setup.broker.bootstrap) as consumer:
            offsets = dict.fromkeys(range(PARTITIONS), 0)
            ends = {p: consumer.get_offsets_before(TOPIC, p, -1)[0] for p in offsets}
            while offsets:
                sets = consumer.multifetch(
                    [FetchRequest(TOPIC, p, o, 8 << 20) for p, o in offsets.items()]
                )
                for s in sets:
                    if take_messages:
                        for message in s:
                            seen += message.value is not None
                    else:
                        seen += len(s)
                    offsets[s.partition] = s.next_offset
                    if s.next_offset >= ends[s.partition]:
                        del offsets[s.partition]
        return seen

    return best_of(setup.runs, run)


def measure(setup: Setup, report: Callable[[str], None]) -> float:
    n = setup.records
    warm = json.dumps({TOPIC: {"0": min(20_000, n // PARTITIONS)}})
    setup.reader(endingOffsets=warm).write.format("noop").mode("overwrite").save()
    figures = {}
    for name, fn in [
        ("spark -> parquet", lambda: spark_to_parquet(setup)),
        ("spark -> noop", lambda: spark_to_noop(setup)),
        ("consumer, messages", lambda: consumer_read(setup, True)),
        ("consumer, decode only", lambda: consumer_read(setup, False)),
    ]:
        seconds, seen = fn()
        assert seen == n, (name, seen, n)
        figures[name] = n / seconds
        report(f"{name:<22} {n / seconds:>12,.0f} rows/s  ({seconds:.2f} s for {n:,} records)")
    ratio = figures["spark -> parquet"] / figures["consumer, messages"]
    report(
        f"ratio spark->parquet / consumer (messages): {ratio:.2f}  "
        f"(/ decode only: {figures['spark -> parquet'] / figures['consumer, decode only']:.2f})"
    )
    return ratio


def measure_isolation(setup: Setup, report: Callable[[str], None]) -> float:
    """Both levels on both topics, in alternation (the best of at least three rounds of
    each), so that load from other work hits them alike."""
    n = setup.records
    warm = json.dumps({TXN_TOPIC: {"0": min(20_000, n // PARTITIONS)}})
    setup.reader(TXN_TOPIC, endingOffsets=warm).write.format("noop").mode("overwrite").save()
    cases = [
        (TXN_TOPIC, "read_uncommitted", n),
        (TXN_TOPIC, "read_committed", n - setup.aborted),
        (TOPIC, "read_uncommitted", n),
        (TOPIC, "read_committed", n),
    ]
    frames = {(t, level): setup.reader(t, **{"kafka.isolation.level": level}) for t, level, _ in cases}
    seconds = dict.fromkeys(frames, float("inf"))
    for _ in range(max(3, setup.runs)):
        for key, df in frames.items():
            t0 = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            seconds[key] = min(seconds[key], time.perf_counter() - t0)
    for topic, level, expected in cases:
        rows = frames[(topic, level)].count()  # checked, not timed
        assert rows == expected, (topic, level, rows, expected)
        took = seconds[(topic, level)]
        report(
            f"{topic:<16} {level:<16} {n / took:>12,.0f} offsets/s "
            f"{rows / took:>12,.0f} rows/s  ({took:.2f} s, {rows:,} rows)"
        )
    ratio = seconds[(TXN_TOPIC, "read_uncommitted")] / seconds[(TXN_TOPIC, "read_committed")]
    plain = seconds[(TOPIC, "read_uncommitted")] / seconds[(TOPIC, "read_committed")]
    report(
        f"ratio read_committed / read_uncommitted offsets/s: {ratio:.2f} with "
        f"{setup.aborted:,} aborted of {n:,}; {plain:.2f} without transactions"
    )
    return ratio


@pytest.fixture(scope="module")
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    _expose_package()
    quick = bool(request.config.getoption("benchmark_disable", False))
    s = Setup(
        QUICK_RECORDS if quick else FULL_RECORDS,
        1 if quick else 2,
        str(tmp_path_factory.mktemp("bench-spark")),
    )
    try:
        yield s
    finally:
        s.close()


def test_spark_reader_to_parquet_vs_consumer(setup: Setup, report: Callable[[str], None]) -> None:
    assert measure(setup, report) > 0


def test_spark_reader_isolation_levels(setup: Setup, report: Callable[[str], None]) -> None:
    assert measure_isolation(setup, report) > 0


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    _expose_package()
    with tempfile.TemporaryDirectory(prefix="bench-spark-") as workdir:
        s = Setup(QUICK_RECORDS if quick else FULL_RECORDS, 1 if quick else 2, workdir)
        try:
            measure(s, print)
            measure_isolation(s, print)
        finally:
            s.close()
