"""Replicated produce: replication factor 3 with acks=all against replication factor 1
with acks=1, same 3-broker cluster (real ZooKeeper), same workload, same run.

    python -m pytest bench/bench_replication.py                        # N = 500,000
    PYKFK_BENCH_QUICK=1 python -m pytest bench/bench_replication.py    # N = 50,000 (CI smoke)

Workload: confluent-kafka producer, N keyed records of 200 bytes over 6 partitions, no
compression, waiting for every delivery, at linger.ms 5 and 20. Both sides use the same
producer settings; only ``acks`` differs (rf3 also has min.insync.replicas=2). Rounds
alternate rf1 / rf3; the figure that matters is the ratio of the medians, rf3 / rf1
(target >= 0.5), printed beside the ratio of the best rounds. With acks=all a batch is
answered only after both followers fetched it, and every record is written three times
on the same cores, so the bench also prints the brokers' CPU seconds per MB produced
(summed over the three brokers, from /proc) for each side.

The idempotent producer is measured on its own line (``test_rf3_idempotent``), not in the
ratio: librdkafka (2.x) limits an idempotent producer's in-flight requests per partition by
comparing its count of in-flight *messages* with the 5-request window, so a partition has
one ProduceRequest in flight at a time and throughput is batch size over the acks=all
round trip; acks=1 cannot be idempotent, so that line has no same-workload rf1 partner.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pykfk.testing import BrokerProcess

QUICK = os.environ.get("PYKFK_BENCH_QUICK") == "1"
N = 50_000 if QUICK else 500_000
ROUNDS = 1 if QUICK else 3
VALUE = b"v" * 200
PARTITIONS = 6
MB = N * len(VALUE) / 1e6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: Any, zookeeper_server: Any) -> Iterator[list[BrokerProcess]]:
    connect = zookeeper_server.connect_string(f"bench-{uuid.uuid4().hex[:8]}")
    base = tmp_path_factory.mktemp("bench-replication")
    brokers = [
        BrokerProcess(
            str(base / f"broker{i}"),
            {
                "broker.id": i,
                "zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": 6000,
                "log.segment.bytes": 256 * 1024 * 1024,
            },
            log_level="WARNING",
        )
        for i in range(3)
    ]
    try:
        for b in brokers:
            b.start(timeout=60)
        yield brokers
    finally:
        for b in brokers:
            b.stop()


def _create(bootstrap: str, name: str, factor: int, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, factor, config=configs)], request_timeout=30)[name].result(40)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (/proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _produce(
    cluster: list[BrokerProcess], topic: str, acks: str, linger_ms: int, idempotence: bool = False
) -> tuple[float, float]:
    """(records per second, brokers' CPU seconds per MB) for N records, all delivered."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": ",".join(b.bootstrap for b in cluster),
        "acks": acks,
        "enable.idempotence": idempotence,
        "linger.ms": linger_ms,
        "batch.size": 1_000_000,
        "queue.buffering.max.messages": 200_000,
        "message.timeout.ms": 120_000,
    })
    errors: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer.produce(topic, key=b"warm-up", value=VALUE, on_delivery=on_delivery)
    assert producer.flush(60) == 0
    cpu_before = sum(_cpu_seconds(b.pid) for b in cluster)
    started = time.perf_counter()
    for i in range(N):
        while True:
            try:
                producer.produce(topic, key=b"%d" % (i % 1000), value=VALUE, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(300) == 0
    elapsed = time.perf_counter() - started
    cpu = sum(_cpu_seconds(b.pid) for b in cluster) - cpu_before
    assert not errors, errors[:3]
    return N / elapsed, cpu / MB


def _line(name: str, rates: list[float], cpu: list[float]) -> str:
    return (f"{name} median {statistics.median(rates):,.0f} rec/s (best {max(rates):,.0f}), "
            f"brokers {statistics.median(cpu) * 1000:.1f} ms CPU/MB")


@pytest.mark.parametrize("linger_ms", [5, 20])
def test_rf3_acks_all_vs_rf1_acks_1(cluster, report, linger_ms: int) -> None:  # type: ignore[no-untyped-def]
    bootstrap = ",".join(b.bootstrap for b in cluster)
    suffix = f"-{linger_ms}"
    _create(bootstrap, "rf1" + suffix, 1, {})
    _create(bootstrap, "rf3" + suffix, 3, {"min.insync.replicas": "2"})
    rates: dict[str, list[float]] = {"rf1": [], "rf3": []}
    cpu: dict[str, list[float]] = {"rf1": [], "rf3": []}
    for _ in range(ROUNDS):
        for name, acks in (("rf1", "1"), ("rf3", "all")):
            rate, cpu_per_mb = _produce(cluster, name + suffix, acks, linger_ms)
            rates[name].append(rate)
            cpu[name].append(cpu_per_mb)
    median_ratio = statistics.median(rates["rf3"]) / statistics.median(rates["rf1"])
    best_ratio = max(rates["rf3"]) / max(rates["rf1"])
    report(
        f"N={N} x {len(VALUE)} B, {PARTITIONS} partitions, 3 brokers, linger.ms={linger_ms}, {ROUNDS} rounds: "
        f"{_line('rf1 acks=1', rates['rf1'], cpu['rf1'])}; {_line('rf3 acks=all', rates['rf3'], cpu['rf3'])}; "
        f"ratio of medians {median_ratio:.2f}, of bests {best_ratio:.2f} (target >= 0.5)"
    )


def test_rf3_idempotent(cluster, report) -> None:  # type: ignore[no-untyped-def]
    bootstrap = ",".join(b.bootstrap for b in cluster)
    _create(bootstrap, "rf3-idempotent", 3, {"min.insync.replicas": "2"})
    rates, cpu = [], []
    for _ in range(ROUNDS):
        rate, cpu_per_mb = _produce(cluster, "rf3-idempotent", "all", 5, idempotence=True)
        rates.append(rate)
        cpu.append(cpu_per_mb)
    report(f"N={N}, linger.ms=5, idempotent producer: {_line('rf3 acks=all', rates, cpu)} "
           "(one request in flight per partition: bound by the acks=all round trip)")
