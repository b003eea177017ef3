"""Fixtures for transaction tests: a broker process whose coordinator looks for timed-out
transactions often, topics, and read helpers for the Python clients."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 60


@pytest.fixture
def broker(pykfk_broker_factory):
    return pykfk_broker_factory(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
                                   "group.initial.rebalance.delay.ms": 0})


def create_topics(bootstrap: str, partitions: int, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(TIMEOUT_S)


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str, *, timeout: float = TIMEOUT_S) -> list[bytes]:
    """Every value a confluent-kafka consumer of ``isolation`` reads from the start to
    the end it sees (end of partition on each), in partition then offset order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "isolation.level": isolation, "enable.partition.eof": True,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    ended: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(ended) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error():
                ended.add(message.partition())
                continue
            got[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert len(ended) == partitions, f"only partitions {sorted(ended)} reached their end"
    return [value for p in range(partitions) for _offset, value in sorted(got[p])]
