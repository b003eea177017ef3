"""partition.metadata (KIP-516): every partition directory names its topic's id in
Kafka's format, and a directory left from an older topic of the same name is never
served as the new topic's."""

from __future__ import annotations

import json
import os
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.log.partition_metadata import encode_topic_id, read_partition_metadata
from pykfk.testing import BrokerProcess, RawClient


def _topic_id(broker: BrokerProcess, name: str) -> uuid.UUID:
    raw = RawClient(broker.host, broker.port)
    try:
        return raw.call(3, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False}).topics[0].topic_id
    finally:
        raw.close()


def _end_offset(broker: BrokerProcess, name: str) -> int:
    raw = RawClient(broker.host, broker.port)
    try:
        answer = raw.call(2, 1, {"replica_id": -1, "topics": [
            {"name": name, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        return answer.topics[0].partitions[0].offset
    finally:
        raw.close()


def test_directories_name_their_topic_and_stale_ones_are_replaced(tmp_path):
    data = str(tmp_path / "data")
    broker = BrokerProcess(data).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("named", 1, 1)])["named"].result(20)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(5):
            producer.produce("named", b"old-%d" % i, partition=0)
        assert producer.flush(10) == 0
        topic_id = _topic_id(broker, "named")
        partition_dir = os.path.join(data, "named-0")
        with open(os.path.join(partition_dir, "partition.metadata"), encoding="ascii") as f:
            assert f.read() == f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n"
        assert _end_offset(broker, "named") == 5
    finally:
        broker.stop()

    # While the broker was down the topic was deleted and made again: a new id, the old
    # directory still there.
    metadata_path = os.path.join(data, "pykfk-metadata.json")
    with open(metadata_path, encoding="utf-8") as f:
        metadata = json.load(f)
    newer = uuid.uuid4()
    metadata["topics"]["named"]["topic_id"] = newer.hex
    with open(metadata_path, "w", encoding="utf-8") as f:
        json.dump(metadata, f)

    broker = BrokerProcess(data).start()
    try:
        assert _topic_id(broker, "named") == newer
        assert _end_offset(broker, "named") == 0  # the old records are not the new topic's
        assert read_partition_metadata(os.path.join(data, "named-0")) == newer
        assert "belongs to an older topic of this name" in broker.log_text()
    finally:
        broker.stop()
