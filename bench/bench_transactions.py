"""Transactions with confluent-kafka against a broker process: transactional produce
(100 and 10,000 records per transaction) against idempotent produce, and read_committed
against read_uncommitted consume of transactional data. N records of 200 bytes
(N = 200,000; 20,000 with PYKFK_BENCH_QUICK=1), 4 partitions, records per second with
the ratio to the baseline of each group.

    python -m pytest bench/bench_transactions.py -q -s
    PYKFK_BENCH_QUICK=1 python -m pytest bench/bench_transactions.py   # CI smoke

Every producer waits for all deliveries (and its last commit); linger 5 ms. Each
producer is warmed before the clock starts (the transactional one by init_transactions
and one transaction of one record, the idempotent one by one record delivered), so
neither rate includes getting a producer id, the topic's metadata or connections. The
transactional runs report the time per transaction too, and the same producers against
librdkafka's mock cluster (``test.mock.num.brokers``, no broker work at all) give the
client's own ceiling: a transaction of 100 is three round trips in sequence
(AddPartitionsToTxn, Produce, EndTxn) plus librdkafka's wait of about 1 ms before it
registers the partitions, whatever the broker does. The consumers read the whole topic
from the beginning with assigned partitions. The broker runs in its own process on the
same (shared) machine: end-to-end rates, not broker CPU.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pykfk.testing import BrokerProcess

QUICK = os.environ.get("PYKFK_BENCH_QUICK") == "1"
N = 20_000 if QUICK else 200_000
VALUE = b"v" * 200
PARTITIONS = 4
TIMEOUT_S = 120
RATES: dict[str, float] = {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: Any) -> Iterator[BrokerProcess]:
    b = BrokerProcess(str(tmp_path_factory.mktemp("bench-txn") / "data"),
                      {"num.partitions": PARTITIONS, "log.segment.bytes": 256 * 1024 * 1024},
                      log_level="WARNING")
    b.start()
    yield b
    b.stop()


def _send_all(producer: Producer, topic: str, count: int) -> None:
    for i in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)


MOCK = {"test.mock.num.brokers": 1}


def produce(bootstrap: str | None, topic: str, per_transaction: int | None) -> float:
    """Records per second; ``per_transaction`` None: idempotent, no transactions;
    ``bootstrap`` None: against librdkafka's mock cluster."""
    conf: dict[str, Any] = {"linger.ms": 5, "enable.idempotence": True,
                            **({"bootstrap.servers": bootstrap} if bootstrap is not None else MOCK)}
    if per_transaction is not None:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:6]}"
    producer = Producer(conf)
    if per_transaction is not None:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        _send_all(producer, topic, 1)
        producer.commit_transaction(TIMEOUT_S)
    else:
        _send_all(producer, topic, 1)
        assert producer.flush(TIMEOUT_S) == 0
    started = time.perf_counter()
    if per_transaction is None:
        _send_all(producer, topic, N)
        assert producer.flush(TIMEOUT_S) == 0
    else:
        for _ in range(N // per_transaction):
            producer.begin_transaction()
            _send_all(producer, topic, per_transaction)
            producer.commit_transaction(TIMEOUT_S)
    return N / (time.perf_counter() - started)


def consume(bootstrap: str, topic: str, isolation: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got = size = 0
    started = time.perf_counter()
    deadline = time.monotonic() + TIMEOUT_S
    while got < count and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                got += 1
                size += len(message.value())  # touch the value
    elapsed = time.perf_counter() - started
    consumer.close()
    assert (got, size) == (count, count * len(VALUE))
    return count / elapsed


@pytest.mark.parametrize("per_transaction", [None, 100, 10_000], ids=["idempotent", "txn-100", "txn-10000"])
def test_produce(broker: BrokerProcess, per_transaction: int | None, report: Callable[[str], None]) -> None:
    rate = produce(broker.bootstrap, f"produce-{uuid.uuid4().hex[:6]}", per_transaction)
    name = "idempotent" if per_transaction is None else f"{per_transaction} per transaction"
    RATES[name] = rate
    baseline = RATES.get("idempotent")
    ratio = f", {rate / baseline:.2f}x idempotent" if baseline and per_transaction is not None else ""
    each = f", {per_transaction / rate * 1000:.2f} ms per transaction" if per_transaction is not None else ""
    report(f"produce {N} x 200 B, {name}: {rate:,.0f} records/s{ratio}{each}")


@pytest.mark.parametrize("per_transaction", [None, 100], ids=["idempotent", "txn-100"])
def test_produce_mock_cluster(per_transaction: int | None, report: Callable[[str], None]) -> None:
    """The client's own ceiling: the same producers against librdkafka's mock cluster."""
    rate = produce(None, f"mock-{uuid.uuid4().hex[:6]}", per_transaction)
    name = "idempotent" if per_transaction is None else f"{per_transaction} per transaction"
    RATES[f"mock {name}"] = rate
    baseline = RATES.get("mock idempotent")
    ratio = f", {rate / baseline:.2f}x idempotent" if baseline and per_transaction is not None else ""
    each = f", {per_transaction / rate * 1000:.2f} ms per transaction" if per_transaction is not None else ""
    pykfk = RATES.get(name)
    against = f"; pykfk at {pykfk / rate:.2f}x this" if pykfk else ""
    report(f"produce {N} x 200 B, {name}, librdkafka mock cluster (no broker): {rate:,.0f} records/s"
           f"{ratio}{each}{against}")


@pytest.fixture(scope="module")
def transactional_topic(broker: BrokerProcess) -> str:
    """N records in committed transactions of 1,000."""
    topic = f"consume-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "transactional.id": f"fill-{topic}"})
    producer.init_transactions(TIMEOUT_S)
    for _ in range(N // 1000):
        producer.begin_transaction()
        _send_all(producer, topic, 1000)
        producer.commit_transaction(TIMEOUT_S)
    return topic


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_consume(broker: BrokerProcess, transactional_topic: str, isolation: str,
                 report: Callable[[str], None]) -> None:
    rate = consume(broker.bootstrap, transactional_topic, isolation, N)
    RATES[isolation] = rate
    baseline = RATES.get("read_uncommitted")
    ratio = f", {rate / baseline:.2f}x read_uncommitted" if baseline and isolation == "read_committed" else ""
    report(f"consume {N} x 200 B of transactions of 1,000, {isolation}: {rate:,.0f} records/s{ratio}")
