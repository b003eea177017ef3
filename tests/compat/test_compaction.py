"""Log compaction end to end: a compacted topic on a broker process, written and read by
confluent-kafka, shrinks to the latest value per key while keeping offsets."""

from __future__ import annotations

import os
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

KEYS = 20
ROUNDS = 400


def _log_bytes(partition_dir: Path) -> int:
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def test_compacted_topic_keeps_the_latest_value_per_key(pykfk_broker_factory, tmp_path):
    data = tmp_path / "data"
    broker = pykfk_broker_factory(
        str(data),
        **{"log.cleaner.backoff.ms": 200, "log.cleaner.min.cleanable.ratio": 0.01},
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = "compacted"
    configs = {"cleanup.policy": "compact", "segment.bytes": "32768"}
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(timeout=15)

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 4096})
    latest: dict[bytes, tuple[bytes, int]] = {}

    def remember(err, msg):
        assert err is None, err
        latest[msg.key()] = (msg.value(), msg.offset())

    for round_no in range(ROUNDS):
        for k in range(KEYS):
            producer.produce(topic, key=b"key-%d" % k, value=b"v%d-" % round_no + os.urandom(40),
                             on_delivery=remember)
        producer.poll(0)
    assert producer.flush(15) == 0
    end_offset = KEYS * ROUNDS

    partition_dir = data / f"{topic}-0"
    written = _log_bytes(partition_dir)
    deadline = time.monotonic() + 30
    while _log_bytes(partition_dir) > written // 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _log_bytes(partition_dir) <= written // 3, "the cleaner did not compact the log"

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "reader",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: dict[bytes, tuple[bytes, int]] = {}
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while (not offsets or offsets[-1] < end_offset - 1) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        offsets.append(msg.offset())
        seen[msg.key()] = (msg.value(), msg.offset())
    consumer.close()

    assert offsets == sorted(set(offsets)), "offsets out of order or repeated"
    assert offsets[-1] == end_offset - 1
    assert len(offsets) < end_offset // 3, "compaction left most records in place"
    # Every key's latest value is there, at the offset it was acknowledged with.
    assert seen == latest
