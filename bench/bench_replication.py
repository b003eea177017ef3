"""Replicated produce: replication factor 3 with acks=all against replication factor 1
with acks=1, same 3-broker cluster (real ZooKeeper), same workload, same run.

    python -m pytest bench/bench_replication.py                        # N = 500,000
    PYKFK_BENCH_QUICK=1 python -m pytest bench/bench_replication.py    # N = 50,000 (CI smoke)

Workload: confluent-kafka producer, N keyed records of 200 bytes over 6 partitions, no
compression, waiting for every delivery, at linger.ms 5 and 20 (both topics alike); rf3
uses min.insync.replicas=2 and enable.idempotence. Rounds alternate rf1 / rf3 and the best round of each counts, which
damps the noise of a shared machine. The figure that matters is the ratio rf3 / rf1
(target >= 0.5): with acks=all a batch is answered only after both followers fetched it,
and every record is written three times on the same cores. Short lingers mean many small
requests, and the per-request work of a Python broker (produce, two follower fetches per
batch) is what the ratio pays for; longer lingers batch it away.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pykfk.testing import BrokerProcess

QUICK = os.environ.get("PYKFK_BENCH_QUICK") == "1"
N = 50_000 if QUICK else 500_000
ROUNDS = 1 if QUICK else 2
VALUE = b"v" * 200
PARTITIONS = 6


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


def _produce(bootstrap: str, topic: str, acks: str, idempotence: bool, linger_ms: int = 5) -> float:
    """Records per second for N records, all delivered."""
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": bootstrap,
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
    assert not errors, errors[:3]
    return N / elapsed


@pytest.mark.parametrize("linger_ms", [5, 20])
def test_rf3_acks_all_vs_rf1_acks_1(cluster, report, linger_ms: int) -> None:  # type: ignore[no-untyped-def]
    bootstrap = ",".join(b.bootstrap for b in cluster)
    suffix = f"-{linger_ms}"
    _create(bootstrap, "rf1" + suffix, 1, {})
    _create(bootstrap, "rf3" + suffix, 3, {"min.insync.replicas": "2"})
    rates: dict[str, list[float]] = {"rf1": [], "rf3": []}
    for _ in range(ROUNDS):
        rates["rf1"].append(_produce(bootstrap, "rf1" + suffix, "1", False, linger_ms))
        rates["rf3"].append(_produce(bootstrap, "rf3" + suffix, "all", True, linger_ms))
    rf1, rf3 = max(rates["rf1"]), max(rates["rf3"])
    report(
        f"N={N} x {len(VALUE)} B, {PARTITIONS} partitions, 3 brokers, linger.ms={linger_ms}: "
        f"rf1 acks=1 {rf1:,.0f} rec/s, rf3 acks=all {rf3:,.0f} rec/s, ratio {rf3 / rf1:.2f} (target >= 0.5)"
    )
