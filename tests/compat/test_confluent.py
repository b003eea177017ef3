"""confluent-kafka (librdkafka) against a pykfk-broker process: bulk produce/consume,
restarts, a kill -9 in the middle of producing, lost indexes and retention."""

from __future__ import annotations

import glob
import os
import threading
import time

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from tests.compat.conftest import expected_records

PARTITIONS = 8
TIMEOUT_S = 60


def create_topics(bootstrap, *names, partitions=PARTITIONS, configs=None):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1, config=configs or {}) for n in names])
    for future in futures.values():
        future.result(TIMEOUT_S)


def produce(bootstrap, topic, records, **conf):
    """Produce ``records`` (partition, key, value, headers, ts); returns (acked, errors)
    where acked maps (partition, offset) -> key/value of each acknowledged record."""
    acked, errors = {}, []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    for partition, key, value, headers, ts in records:
        while True:
            try:
                producer.produce(topic, value, key, partition=partition, headers=headers, timestamp=ts, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return acked, errors


def consume(bootstrap, topic, count, *, partitions=PARTITIONS, offset=OFFSET_BEGINNING, timeout=TIMEOUT_S):
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compat", "enable.auto.commit": False, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.assign([TopicPartition(topic, p, offset) for p in range(partitions)])
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < count and time.monotonic() < deadline:
            for msg in consumer.consume(10000, timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                got.append(msg)
        return got
    finally:
        consumer.close()


def check(got, expected):
    want = {}
    for partition, key, value, headers, ts in expected:
        want.setdefault(partition, []).append((key, value, headers, ts))
    by_partition = {}
    for msg in got:
        by_partition.setdefault(msg.partition(), []).append(msg)
    assert set(by_partition) == set(want)
    for partition, msgs in by_partition.items():
        assert [m.offset() for m in msgs] == list(range(len(msgs)))
        seen = [(m.key(), m.value(), [(k, v or b"") for k, v in (m.headers() or [])], m.timestamp()[1]) for m in msgs]
        assert seen == want[partition]


def test_admin_create_and_delete(shared_broker, topic_name):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    create_topics(shared_broker.bootstrap, topic_name, configs={"cleanup.policy": "delete", "segment.bytes": "1048576"})
    metadata = admin.list_topics(timeout=10)
    assert len(metadata.topics[topic_name].partitions) == PARTITIONS
    with pytest.raises(KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(TIMEOUT_S)
    admin.delete_topics([topic_name])[topic_name].result(TIMEOUT_S)
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_hundred_thousand_keyed_records(shared_broker, topic_name):
    create_topics(shared_broker.bootstrap, topic_name)
    expected = expected_records(100_000, PARTITIONS, value_size=100)
    acked, errors = produce(
        shared_broker.bootstrap, topic_name, expected, acks="all", **{"enable.idempotence": True, "compression.type": "lz4"}
    )
    assert not errors and len(acked) == len(expected)
    check(consume(shared_broker.bootstrap, topic_name, len(expected)), expected)


CASES = [
    (acks, codec, idempotent)
    for acks in ("0", "1", "all")
    for codec in ("none", "gzip", "snappy", "lz4", "zstd")
    for idempotent in ((False, True) if acks == "all" else (False,))
]


@pytest.mark.parametrize("acks, codec, idempotent", CASES)
def test_produce_matrix(shared_broker, topic_name, acks, codec, idempotent):
    create_topics(shared_broker.bootstrap, topic_name)
    expected = expected_records(2000, PARTITIONS, value_size=150)
    conf = {"acks": acks, "compression.type": codec, "enable.idempotence": idempotent}
    _acked, errors = produce(shared_broker.bootstrap, topic_name, expected, **conf)
    assert not errors
    check(consume(shared_broker.bootstrap, topic_name, len(expected)), expected)


def test_latest_explicit_offsets_and_times(shared_broker, topic_name):
    create_topics(shared_broker.bootstrap, topic_name, partitions=1)
    records = [(0, b"k", b"%d" % i, [], 50_000 + 10 * i) for i in range(40)]
    produce(shared_broker.bootstrap, topic_name, records)
    assert [m.value() for m in consume(shared_broker.bootstrap, topic_name, 5, partitions=1, offset=35)] == [
        b"%d" % i for i in range(35, 40)
    ]
    # Auto-commit on (the default): close() commits through the group coordinator.
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "times"})
    try:
        tp = TopicPartition(topic_name, 0, 50_000 + 125)
        assert consumer.offsets_for_times([tp], timeout=10)[0].offset == 13
        assert consumer.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=10) == (0, 40)
        consumer.assign([TopicPartition(topic_name, 0, OFFSET_END)])
        consumer.consume(1, timeout=1.0)  # lets the consumer resolve "latest" (ListOffsets -1)
        produce(shared_broker.bootstrap, topic_name, [(0, b"k", b"new", [], 90_000)])
        got = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got = [m for m in consumer.consume(10, timeout=0.5) if not m.error()]
        assert [(m.offset(), m.value()) for m in got] == [(40, b"new")]
    finally:
        consumer.close()


def test_restart_between_produce_and_consume(pykfk_broker_factory, topic_name):
    broker = pykfk_broker_factory()
    create_topics(broker.bootstrap, topic_name)
    expected = expected_records(5000, PARTITIONS)
    produce(broker.bootstrap, topic_name, expected, acks="all")
    assert broker.restart().is_running()
    assert "Recovering" not in broker.log_text()  # a clean stop needs no recovery scan
    check(consume(broker.bootstrap, topic_name, len(expected)), expected)


def _newest_log_file(log_dir, topic, partition):
    return max(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log")))


def test_kill_9_mid_produce_keeps_every_acknowledged_record(pykfk_broker_factory, topic_name):
    broker = pykfk_broker_factory()
    create_topics(broker.bootstrap, topic_name)
    acked, stop = {}, threading.Event()

    def delivered(err, msg):
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()

    def run():
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2, "message.timeout.ms": 3000, "retries": 0}
        )
        i = 0
        while not stop.is_set():
            try:
                producer.produce(topic_name, b"value-%08d" % i, b"key-%d" % i, partition=i % PARTITIONS, on_delivery=delivered)
                i += 1
            except BufferError:
                pass
            producer.poll(0.001 if i % 100 == 0 else 0)
        producer.flush(10)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while len(acked) < 20_000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()
    stop.set()
    thread.join(30)
    assert len(acked) >= 20_000

    # A torn write: half a batch at the end of a segment, as a crash mid-write leaves it.
    with open(_newest_log_file(broker.log_dir, topic_name, 0), "ab") as f:
        f.write(b"\x00" * 8 + (500).to_bytes(4, "big") + b"\x01" * 40)
    broker.start()
    assert "torn or corrupt tail" in broker.log_text()
    got = consume(broker.bootstrap, topic_name, len(acked))
    stored = {(m.partition(), m.offset()): m.value() for m in got}
    missing = [k for k, v in acked.items() if stored.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"


def test_deleted_index_files_are_rebuilt(pykfk_broker_factory, topic_name):
    broker = pykfk_broker_factory(log_segment_bytes=20_000, log_index_interval_bytes=512)
    create_topics(broker.bootstrap, topic_name, partitions=2)
    expected = expected_records(3000, 2)
    produce(broker.bootstrap, topic_name, expected, **{"batch.num.messages": 20})
    assert broker.stop() == 0
    indexes = glob.glob(os.path.join(broker.log_dir, f"{topic_name}-*", "*.index"))
    assert len(indexes) > 4  # several segments per partition
    for path in indexes + glob.glob(os.path.join(broker.log_dir, f"{topic_name}-*", "*.timeindex")):
        os.unlink(path)
    broker.start()
    check(consume(broker.bootstrap, topic_name, len(expected), partitions=2), expected)
    middle = consume(broker.bootstrap, topic_name, 10, partitions=1, offset=1234)
    assert middle[0].offset() == 1234 and middle[0].value() == expected[2 * 1234][2]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "idx", "enable.auto.commit": False})
    try:
        found = consumer.offsets_for_times([TopicPartition(topic_name, 0, expected[2 * 700][4])], timeout=10)
        assert found[0].offset == 700
    finally:
        consumer.close()


def _partition_files(log_dir, topic, partition):
    return sorted(glob.glob(os.path.join(log_dir, f"{topic}-{partition}", "*.log")))


def test_retention_deletes_old_segments_while_a_consumer_reads(pykfk_broker_factory, topic_name):
    broker = pykfk_broker_factory(log_retention_check_interval_ms=200, log_segment_delete_delay_ms=0)
    by_time, by_size = topic_name + "-time", topic_name + "-size"
    create_topics(broker.bootstrap, by_time, partitions=1, configs={"segment.bytes": "8000", "retention.ms": "60000"})
    create_topics(
        broker.bootstrap, by_size, partitions=1, configs={"segment.bytes": "8000", "retention.bytes": "30000", "retention.ms": "-1"}
    )
    hour_ago = int(time.time() * 1000) - 3_600_000
    old = [(0, b"old", b"x" * 500, [], hour_ago + i) for i in range(200)]
    produce(broker.bootstrap, by_time, old, **{"batch.num.messages": 5})
    produce(broker.bootstrap, by_size, old, **{"batch.num.messages": 5})

    # A consumer follows the time-retained topic from the start while retention runs and
    # new records keep arriving.
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "ret", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(by_time, 0, OFFSET_BEGINNING)])
    new_values, received = [b"new-%d" % i for i in range(100)], []

    def drain(timeout):
        received.extend(m.value() for m in consumer.consume(100, timeout=timeout) if not m.error())

    try:
        for chunk in range(5):
            now = int(time.time() * 1000)
            produce(broker.bootstrap, by_time, [(0, b"new", v, [], now) for v in new_values[chunk * 20 : chunk * 20 + 20]])
            drain(0.3)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            low, high = consumer.get_watermark_offsets(TopicPartition(by_time, 0), timeout=10)
            if low > 0 and sum(v.startswith(b"new") for v in received) >= len(new_values):
                break
            drain(0.2)
        assert low > 0, "old segments were not deleted by time"
        assert high == 300
        assert sorted(v for v in received if v.startswith(b"new")) == sorted(new_values)
    finally:
        consumer.close()
    assert len(_partition_files(broker.log_dir, by_time, 0)) < 200 * 500 // 8000

    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        size = sum(os.path.getsize(p) for p in _partition_files(broker.log_dir, by_size, 0))
        if size <= 30000 + 8000:
            break
        time.sleep(0.2)
    assert size <= 30000 + 8000, "segments over retention.bytes were not deleted"
    remaining = consume(broker.bootstrap, by_size, 1, partitions=1)
    assert remaining and remaining[0].offset() > 0
