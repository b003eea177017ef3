"""kafka-python 3 against a pykfk-broker process."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import (
    ConfigResource,
    ConfigResourceType,
    KafkaAdminClient,
    NewPartitions,
    NewTopic,
)
from kafka.errors import TopicAlreadyExistsError

from tests.compat.conftest import expected_records

PARTITIONS = 8
TIMEOUT_S = 30


def admin_for(broker):
    return KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)


def create(broker, name, partitions=PARTITIONS, configs=None):
    admin = admin_for(broker)
    try:
        admin.create_topics([NewTopic(name, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()


def consume_all(broker, tps, count, **kw):
    """Every record of ``tps`` from the earliest offset, by assignment (no group)."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, **kw)
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning()
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(records)
        return got
    finally:
        consumer.close()


def check_records(got, expected, *, timestamps=True):
    by_partition = {}
    for record in got:
        by_partition.setdefault(record.partition, []).append(record)
    want = {}
    for partition, key, value, headers, ts in expected:
        want.setdefault(partition, []).append((key, value, headers, ts))
    assert set(by_partition) == set(want)
    for partition, records in by_partition.items():
        assert [r.offset for r in records] == list(range(len(records)))  # order, no gaps
        seen = [(r.key, r.value, [(k, v) for k, v in r.headers], r.timestamp) for r in records]
        if not timestamps:
            seen = [s[:3] + (None,) for s in seen]
            want[partition] = [w[:3] + (None,) for w in want[partition]]
        assert seen == want[partition]


def test_admin_create_describe_delete(shared_broker, topic_name):
    admin = admin_for(shared_broker)
    try:
        admin.create_topics([NewTopic(topic_name, 3, 1, topic_configs={"retention.ms": "86400000"})])
        assert topic_name in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic_name, 3, 1)])
        admin.create_partitions({topic_name: NewPartitions(5)})
        described = admin.describe_topics([topic_name])[0]
        assert len(described["partitions"]) == 5
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic_name)])
        assert "86400000" in repr(configs)
        admin.delete_topics([topic_name])
        assert topic_name not in admin.list_topics()
    finally:
        admin.close()


CASES = [
    (acks, codec, idempotent)
    for acks in (0, 1, "all")
    for codec in (None, "gzip", "snappy", "lz4", "zstd")
    for idempotent in ((False, True) if acks == "all" else (False,))
]


@pytest.mark.parametrize("acks, codec, idempotent", CASES)
def test_produce_and_consume_back(shared_broker, topic_name, acks, codec, idempotent):
    create(shared_broker, topic_name)
    expected = expected_records(800, PARTITIONS, value_size=200)
    producer = KafkaProducer(
        bootstrap_servers=shared_broker.bootstrap,
        acks=acks,
        compression_type=codec,
        enable_idempotence=idempotent,
        linger_ms=5,
    )
    try:
        futures = [
            producer.send(topic_name, key=k, value=v, partition=p, headers=h, timestamp_ms=ts)
            for p, k, v, h, ts in expected
        ]
        producer.flush(TIMEOUT_S)
        metadata = [f.get(TIMEOUT_S) for f in futures]
    finally:
        producer.close(TIMEOUT_S)
    if acks != 0:
        assert sorted(m.offset for m in metadata if m.partition == 0) == list(range(100))
    tps = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]
    check_records(consume_all(shared_broker, tps, len(expected)), expected)


def test_latest_explicit_offsets_and_times(shared_broker, topic_name):
    create(shared_broker, topic_name, 1)
    tp = TopicPartition(topic_name, 0)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, linger_ms=2)
    for i in range(50):
        producer.send(topic_name, key=b"k", value=b"%d" % i, partition=0, timestamp_ms=10_000 + i * 10)
    producer.flush(TIMEOUT_S)

    consumer = KafkaConsumer(bootstrap_servers=shared_broker.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp])[tp] == 0
        assert consumer.end_offsets([tp])[tp] == 50
        found = consumer.offsets_for_times({tp: 10_000 + 205})[tp]
        assert (found.offset, found.timestamp) == (21, 10_210)
        assert consumer.offsets_for_times({tp: 99_999_999})[tp] is None

        consumer.seek(tp, 42)
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 8 and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=500).get(tp, []))
        assert [r.value for r in got] == [b"%d" % i for i in range(42, 50)]

        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 50
        for i in range(50, 53):
            producer.send(topic_name, key=b"k", value=b"%d" % i, partition=0)
        producer.flush(TIMEOUT_S)
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < 3 and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_ms=500).get(tp, []))
        assert [r.offset for r in got] == [50, 51, 52]
    finally:
        consumer.close()
        producer.close(TIMEOUT_S)
