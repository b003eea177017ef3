"""DeleteRecords through confluent-kafka's admin client: the low watermark moves, older
records are gone for consumers, their segments are deleted, and bad requests get Kafka's
errors."""

from __future__ import annotations

import os
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient


def test_records_below_the_offset_are_deleted(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {"log.retention.check.interval.ms": 200,
                                                    "log.segment.delete.delay.ms": 0}).start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("trim", 1, 1, config={"segment.bytes": "4096"})])["trim"].result(20)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": 1, "linger.ms": 0})
        for i in range(100):
            producer.produce("trim", b"%03d" % i + b"x" * 400)
            producer.poll(0)
        assert producer.flush(20) == 0
        partition_dir = os.path.join(broker.log_dir, "trim-0")
        segments_before = len([f for f in os.listdir(partition_dir) if f.endswith(".log")])

        deleted = admin.delete_records([TopicPartition("trim", 0, 60)])
        (future,) = deleted.values()
        assert future.result(20).low_watermark == 60

        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "after-trim"})
        try:
            assert consumer.get_watermark_offsets(TopicPartition("trim", 0), timeout=10) == (60, 100)
            consumer.assign([TopicPartition("trim", 0, OFFSET_BEGINNING)])
            first = None
            deadline = time.monotonic() + 20
            while first is None and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    first = message
        finally:
            consumer.close()
        assert first is not None and first.offset() == 60 and first.value().startswith(b"060")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if len([f for f in os.listdir(partition_dir) if f.endswith(".log")]) < segments_before:
                break
            time.sleep(0.2)
        assert len([f for f in os.listdir(partition_dir) if f.endswith(".log")]) < segments_before

        raw = RawClient(broker.host, broker.port)
        try:
            answer = raw.call(21, 1, {"topics": [
                {"name": "trim", "partitions": [{"partition_index": 0, "offset": 500},
                                                {"partition_index": 7, "offset": 1}]},
                {"name": "nope", "partitions": [{"partition_index": 0, "offset": 1}]}], "timeout_ms": 5000})
            codes = [[p.error_code for p in t.partitions] for t in answer.topics]
            assert codes == [[ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION],
                             [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]]
            to_end = raw.call(21, 1, {"topics": [{"name": "trim", "partitions": [
                {"partition_index": 0, "offset": -1}]}], "timeout_ms": 5000})
            assert to_end.topics[0].partitions[0].low_watermark == 100
        finally:
            raw.close()
    finally:
        broker.stop()
