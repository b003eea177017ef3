"""kafka-python's and aiokafka's read_committed consumers over transactions written by
confluent-kafka: aborted records are skipped (the aborted-transactions list of each
Fetch), committed ones seen exactly once, markers never returned as records; their
read_uncommitted consumers see the aborted records too."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from tests.txn.conftest import TIMEOUT_S, create_topics

PARTITIONS = 2


@pytest.fixture
def written(broker):
    """Three transactions on topic "mixed": committed, aborted, committed; returns the
    committed and the aborted values."""
    create_topics(broker.bootstrap, PARTITIONS, "mixed")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-mixed"})
    producer.init_transactions(TIMEOUT_S)
    committed, aborted = [], []
    for round_, commit in enumerate((True, False, True)):
        producer.begin_transaction()
        values = [b"%s-%d-%d" % (b"c" if commit else b"a", round_, i) for i in range(20)]
        for i, value in enumerate(values):
            producer.produce("mixed", value, partition=i % PARTITIONS)
        producer.flush(TIMEOUT_S)
        if commit:
            producer.commit_transaction(TIMEOUT_S)
            committed.extend(values)
        else:
            producer.abort_transaction(TIMEOUT_S)
            aborted.extend(values)
    return broker, committed, aborted


def kafka_python_read(bootstrap: str, isolation: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             consumer_timeout_ms=1000)
    consumer.assign([KpTopicPartition("mixed", p) for p in range(PARTITIONS)])
    consumer.seek_to_beginning()
    got: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        # Nothing more arrives after the expected records.
        got.extend(r.value for records in consumer.poll(timeout_ms=1000).values() for r in records)
    finally:
        consumer.close()
    return got


async def aiokafka_read(bootstrap: str, isolation: str, expected: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
    await consumer.start()
    got: list[bytes] = []
    try:
        partitions = [AioTopicPartition("mixed", p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        async with asyncio.timeout(TIMEOUT_S):
            while len(got) < expected:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in records)
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            got.extend(r.value for r in records)
    finally:
        await consumer.stop()
    return got


def test_kafka_python_read_committed(written):
    broker, committed, aborted = written
    assert sorted(kafka_python_read(broker.bootstrap, "read_committed", len(committed))) == sorted(committed)
    everything = committed + aborted
    assert sorted(kafka_python_read(broker.bootstrap, "read_uncommitted", len(everything))) == sorted(everything)


async def test_aiokafka_read_committed(written):
    broker, committed, aborted = written
    assert sorted(await aiokafka_read(broker.bootstrap, "read_committed", len(committed))) == sorted(committed)
    everything = committed + aborted
    assert sorted(await aiokafka_read(broker.bootstrap, "read_uncommitted", len(everything))) == sorted(everything)
