"""pykfk's Producer and ConsumerConnector against kafka-python and confluent-kafka, same
broker process, same run: messages per second for N records of 200 bytes (N = 1,000,000;
50,000 with PYKFK_BENCH_QUICK=1).

    python -m pytest bench/bench_clients.py                        # full run
    PYKFK_BENCH_QUICK=1 python -m pytest bench/bench_clients.py    # CI smoke

Every producer sends N null-key records, acks=1, no compression, linger 5 ms, batches of
about 1 MB, and waits for all deliveries. Every consumer reads N records of a
4-partition topic from the beginning in a consumer group and touches each value. The
broker runs in its own process on the same (shared) machine, so the figures are
end-to-end rates, not client CPU alone.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pykfk.testing import BrokerProcess

QUICK = os.environ.get("PYKFK_BENCH_QUICK") == "1"
N = 50_000 if QUICK else 1_000_000
VALUE = b"v" * 200
PARTITIONS = 4
RESULTS: dict[tuple[str, str], float] = {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: Any) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        str(tmp_path_factory.mktemp("bench-clients") / "data"),
        {
            "num.partitions": PARTITIONS,
            "group.initial.rebalance.delay.ms": 0,
            "log.segment.bytes": 256 * 1024 * 1024,
        },
        log_level="WARNING",
    )
    b.start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def filled_topic(broker: BrokerProcess) -> str:
    """N records to consume, written once by pykfk's producer."""
    from pykfk.producer import Producer

    topic = f"consume-{uuid.uuid4().hex[:6]}"
    with Producer(broker.bootstrap, acks=1) as producer:
        for _ in range(N):
            producer.send(topic, VALUE)
    return topic


def timed(benchmark: Any, run: Callable[[], int]) -> float:
    """Run once under pytest-benchmark; returns messages per second."""
    elapsed: list[float] = []

    def once() -> None:
        start = time.perf_counter()
        count = run()
        elapsed.append(time.perf_counter() - start)
        assert count == N, f"{count} of {N} messages"

    benchmark.pedantic(once, rounds=1, iterations=1)
    return N / elapsed[-1]


# ------------------------------------------------------------------ producers


def produce_pykfk(bootstrap: str, topic: str) -> int:
    from pykfk.producer import Producer

    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=1_000_000) as producer:
        send = producer.send
        for _ in range(N):
            send(topic, VALUE)
        producer.flush()
        return N


def produce_kafka_python(bootstrap: str, topic: str) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=1_000_000
    )
    try:
        for _ in range(N):
            producer.send(topic, VALUE)
        producer.flush()
        return N
    finally:
        producer.close()


def produce_confluent(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    produce, poll = producer.produce, producer.poll
    for _ in range(N):
        try:
            produce(topic, VALUE)
        except BufferError:
            poll(0.01)
            produce(topic, VALUE)
    assert producer.flush(120) == 0
    return N


PRODUCERS = {
    "pykfk": produce_pykfk,
    "kafka-python": produce_kafka_python,
    "confluent-kafka": produce_confluent,
}


@pytest.mark.parametrize("client", list(PRODUCERS))
def test_produce(
    benchmark: Any, broker: BrokerProcess, client: str, report: Callable[[str], None]
) -> None:
    topic = f"produce-{client}-{uuid.uuid4().hex[:6]}"
    rate = timed(benchmark, lambda: PRODUCERS[client](broker.bootstrap, topic))
    RESULTS[("produce", client)] = rate
    report(f"produce {client}: {rate:,.0f} msgs/s ({N:,} x {len(VALUE)} B)")


# ------------------------------------------------------------------ consumers


def consume_pykfk(bootstrap: str, topic: str) -> int:
    from pykfk.consumer import ConsumerConnector

    connector = ConsumerConnector(
        f"bench-{uuid.uuid4().hex[:6]}",
        bootstrap,
        auto_offset_reset="smallest",
        consumer_timeout_ms=10000,
    )
    try:
        (stream,) = connector.create_message_streams({topic: 1})[topic]
        count = 0
        for message in stream:
            _ = message.value
            count += 1
            if count == N:
                break
        return count
    finally:
        connector.shutdown()


def consume_kafka_python(bootstrap: str, topic: str) -> int:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"bench-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=10000,
        fetch_max_bytes=50 * 1024 * 1024,
        max_partition_fetch_bytes=1024 * 1024,
    )
    try:
        count = 0
        for message in consumer:
            _ = message.value
            count += 1
            if count == N:
                break
        return count
    finally:
        consumer.close()


def consume_confluent(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.subscribe([topic])
        count = 0
        deadline = time.monotonic() + 300
        while count < N and time.monotonic() < deadline:
            for message in consumer.consume(10000, timeout=1.0):
                if message.error() is None:
                    _ = message.value()
                    count += 1
        return count
    finally:
        consumer.close()


CONSUMERS = {
    "pykfk": consume_pykfk,
    "kafka-python": consume_kafka_python,
    "confluent-kafka": consume_confluent,
}


@pytest.mark.parametrize("client", list(CONSUMERS))
def test_consume(
    benchmark: Any,
    broker: BrokerProcess,
    filled_topic: str,
    client: str,
    report: Callable[[str], None],
) -> None:
    rate = timed(benchmark, lambda: CONSUMERS[client](broker.bootstrap, filled_topic))
    RESULTS[("consume", client)] = rate
    report(f"consume {client}: {rate:,.0f} msgs/s ({N:,} x {len(VALUE)} B)")


def test_ratios(report: Callable[[str], None]) -> None:
    """pykfk against the others, from this run's figures (targets: >= 5x kafka-python for
    producing and consuming, >= 0.5x confluent-kafka for consuming)."""
    for role in ("produce", "consume"):
        ours = RESULTS.get((role, "pykfk"))
        if ours is None:
            continue
        for other in ("kafka-python", "confluent-kafka"):
            theirs = RESULTS.get((role, other))
            if theirs:
                report(f"{role}: pykfk / {other} = {ours / theirs:.2f}x")
