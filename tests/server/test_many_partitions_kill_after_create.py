"""A topic of many partitions created through a real client survives a kill -9 of the
broker right after CreateTopics answered: the truth is the embedded metadata file
(written and fsynced before the answer), the partitions' directories and files are made
again at the start for any that the kill left without them, and every partition takes a
record and gives it back (real broker process, confluent-kafka)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.testing import BrokerProcess

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 1000


def _produce_one_each(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failed: list[object] = []
    for p in range(PARTITIONS):
        producer.produce(topic, b"v%d" % p, partition=p,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(60) == 0 and not failed, failed[:5]


def _read_all(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        got: dict[int, list[bytes]] = {}
        for _ in range(600):
            if sum(len(v) for v in got.values()) >= PARTITIONS:
                break
            for msg in consumer.consume(1000, 0.1):
                assert msg.error() is None, msg.error()
                got.setdefault(msg.partition(), []).append(msg.value())
        return got
    finally:
        consumer.close()


def test_a_topic_of_many_partitions_survives_a_kill_right_after_it_was_created(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(str(data), log_level="WARNING").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("many", PARTITIONS, 1)], request_timeout=120)["many"].result(120)
        broker.kill()  # SIGKILL at once: background work of the creation cut short
        broker.start()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = admin.list_topics(timeout=30).topics
        assert "many" in topics and len(topics["many"].partitions) == PARTITIONS
        assert all(p.error is None and p.leader == 0 for p in topics["many"].partitions.values())
        assert all(os.path.isdir(data / f"many-{p}") for p in range(PARTITIONS))
        _produce_one_each(broker.bootstrap, "many")
        got = _read_all(broker.bootstrap, "many")
        assert got == {p: [b"v%d" % p] for p in range(PARTITIONS)}
        # The index files held back during the creation exist now for every partition.
        broker.kill()
        assert all((data / f"many-{p}" / "00000000000000000000.index").exists() for p in range(PARTITIONS))
    finally:
        broker.stop()
