"""pykfk's Producer against a broker process; what it writes is read back by
kafka-python and confluent-kafka, and what they write is read back by pykfk."""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time

import pytest

from pykfk.client.partitioner import murmur2, partition_for_key
from pykfk.client.serializers import JsonDeserializer, JsonSerializer, StringSerializer
from pykfk.consumer import SimpleConsumer
from pykfk.errors import KafkaError
from pykfk.producer import Producer, RecordMetadata


def records(n: int, null_header: bool = True) -> list[tuple[bytes | None, bytes, list, int]]:
    """(key, value, headers, timestamp): nulls, empty values, headers, binary bytes."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else b"key-%d" % (i % 7)
        value = b"" if i % 11 == 0 else bytes(range(i % 256)) + b"value-%d" % i
        headers = [("h", b"%d" % i), ("null", None if null_header else b"")] if i % 3 == 0 else []
        out.append((key, value, headers, 1_700_000_000_000 + i))
    return out


def read_all_pykfk(bootstrap: str, topic: str, partitions: int, expected: int) -> list[tuple]:
    out = []
    deadline = time.monotonic() + 20
    with SimpleConsumer(bootstrap) as consumer:
        for p in range(partitions):
            offset = 0
            while True:
                ms = consumer.fetch(topic, p, offset)
                out += [(m.partition, m.offset, m.key, m.value, m.headers, m.timestamp) for m in ms]
                if ms.next_offset == offset or ms.next_offset >= ms.high_watermark:
                    break
                offset = ms.next_offset
                assert time.monotonic() < deadline
    assert len(out) == expected
    return out


def read_kafka_python(bootstrap: str, topic: str, expected: int) -> list[tuple]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10000
    )
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        out = []
        for m in consumer:
            out.append(
                (m.partition, m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp)
            )
            if len(out) == expected:
                break
        return out
    finally:
        consumer.close()


def read_confluent(bootstrap: str, topic: str, partitions: int, expected: int) -> list[tuple]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = []
        deadline = time.monotonic() + 20
        while len(out) < expected and time.monotonic() < deadline:
            for m in consumer.consume(1000, timeout=0.5):
                assert m.error() is None, m.error()
                out.append(
                    (
                        m.partition(),
                        m.offset(),
                        m.key(),
                        m.value(),
                        list(m.headers() or []),
                        m.timestamp()[1],
                    )
                )
        return out
    finally:
        consumer.close()


def normalized(rows: list[tuple]) -> list[tuple]:
    """Null values read as b"" by some clients' headers; keep as is but sort."""
    return sorted((p, o, k, v, [(hk, hv) for hk, hv in h], ts) for p, o, k, v, h, ts in rows)


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
def test_records_read_back_identically_by_other_clients(broker, topic, compression):
    rows = records(300)
    with Producer(broker.bootstrap, compression_type=compression, linger_ms=20) as producer:
        futures = [producer.send(topic, v, key=k, headers=h, timestamp=ts) for k, v, h, ts in rows]
        producer.flush(20)
    metas = [f.result(0) for f in futures]
    assert all(isinstance(m, RecordMetadata) and m.offset >= 0 for m in metas)
    assert len({(m.partition, m.offset) for m in metas}) == len(rows)
    written = sorted(
        (m.partition, m.offset, k, v, [(hk, hv) for hk, hv in h], ts)
        for m, (k, v, h, ts) in zip(metas, rows)
    )
    assert normalized(read_all_pykfk(broker.bootstrap, topic, 4, len(rows))) == written
    assert normalized(read_kafka_python(broker.bootstrap, topic, len(rows))) == written
    confluent = read_confluent(broker.bootstrap, topic, 4, len(rows))
    # librdkafka reports a null header value as None too
    assert normalized(confluent) == written


def test_other_clients_records_read_back_identically_by_pykfk(broker, topic):
    from confluent_kafka import Producer as ConfluentProducer
    from kafka import KafkaProducer

    rows = records(200, null_header=False)  # kafka-python refuses null header values
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
    for k, v, h, ts in rows[:100]:
        kp.send(topic, v, key=k, headers=h, timestamp_ms=ts, partition=0)
    kp.flush(20)
    kp.close()
    cp = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4"})
    for k, v, h, ts in rows[100:]:
        cp.produce(topic, v, key=k, headers=h, timestamp=ts, partition=1)
    assert cp.flush(20) == 0
    got = read_all_pykfk(broker.bootstrap, topic, 4, len(rows))
    by_partition = {0: [], 1: []}
    for p, o, k, v, h, ts in sorted(got):
        by_partition[p].append((k, v, h, ts))
    assert by_partition[0] == [(k, v, h, ts) for k, v, h, ts in rows[:100]]
    assert by_partition[1] == [(k, v, h, ts) for k, v, h, ts in rows[100:]]


def test_sync_mode_returns_offsets_and_send_many(broker, topic):
    with Producer(broker.bootstrap, producer_type="sync") as producer:
        assert [
            producer.send(topic, b"a", partition=2),
            producer.send(topic, b"b", partition=2),
        ] == [0, 1]
        assert producer.send_many(topic, [b"c", b"d", b"e"], partition=2) == [2, 3, 4]
    with SimpleConsumer(broker.bootstrap) as consumer:
        assert [m.value for m in consumer.fetch(topic, 2, 0)] == [b"a", b"b", b"c", b"d", b"e"]


def test_async_futures_and_callbacks(broker, topic):
    seen = []
    done = threading.Event()

    def on_delivery(metadata, error):
        seen.append((metadata, error))
        if len(seen) == 50:
            done.set()

    with Producer(broker.bootstrap, linger_ms=50) as producer:
        futures = [
            producer.send(topic, b"v%d" % i, partition=1, callback=on_delivery) for i in range(50)
        ]
        assert isinstance(futures[0], concurrent.futures.Future)
        _finished, pending = concurrent.futures.wait(futures, timeout=20)
        assert not pending
        later = []
        futures[0].add_done_callback(later.append)  # already done: runs at once
        assert later == [futures[0]]
        assert done.wait(10)
    assert [f.result().offset for f in futures] == list(range(50))
    assert all(error is None for _, error in seen)
    assert sorted(m.offset for m, _ in seen) == list(range(50))
    assert {f.result().partition for f in futures} == {1}
    assert futures[0].cancel() is False


def test_failure_reaches_future_and_callback(broker, topic):
    errors = []
    # 1 MiB + 1 byte value: over the broker's message.max.bytes -> MESSAGE_TOO_LARGE, not retried
    with Producer(broker.bootstrap, acks=1, batch_size=4 * 1024 * 1024) as producer:
        future = producer.send(
            topic, b"x" * (2 * 1024 * 1024), callback=lambda m, e: errors.append(e)
        )
        with pytest.raises(KafkaError) as info:
            future.result(20)
    assert info.value.code.name == "MESSAGE_TOO_LARGE"
    assert errors and isinstance(errors[0], KafkaError)


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker, topic, acks):
    with Producer(broker.bootstrap, acks=acks) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=0) for i in range(20)]
        producer.flush(10)
        offsets = [f.result().offset for f in futures]
    assert offsets == ([-1] * 20 if acks == 0 else list(range(20)))
    deadline = time.monotonic() + 10
    with SimpleConsumer(broker.bootstrap) as consumer:
        while True:
            got = [m.value for m in consumer.fetch(topic, 0, 0)]
            if len(got) == 20 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert got == [b"v%d" % i for i in range(20)]


def test_idempotent_batches_carry_producer_id_and_sequences(broker, topic):
    from pykfk._core.records import iter_records

    with Producer(broker.bootstrap, linger_ms=1, batch_size=2000) as producer:
        assert producer.idempotent
        for i in range(100):
            producer.send(topic, b"x" * 100, partition=3)
        producer.flush(10)
    with SimpleConsumer(broker.bootstrap) as consumer:
        raw = consumer._conn.request(
            1,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 3, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                        ],
                    }
                ],
            },
        )
    recs = list(iter_records(raw.responses[0].partitions[0].records))
    assert len(recs) == 100
    assert len({r.producer_id for r in recs}) == 1 and recs[0].producer_id >= 0
    assert [r.sequence for r in recs] == list(range(100))
    assert len({r.batch.base_offset for r in recs}) > 1  # several batches, numbered in order
    with Producer(broker.bootstrap, acks=1) as producer:
        assert not producer.idempotent


def test_serializers_and_custom_partitioner(broker, topic):
    chosen = []

    def last_partition(key, partitions):
        chosen.append(key)
        return partitions[-1]

    with Producer(
        broker.bootstrap,
        producer_type="sync",
        key_serializer=StringSerializer(),
        value_serializer=JsonSerializer(),
        partitioner=last_partition,
    ) as producer:
        producer.send(topic, {"a": [1, 2]}, key="k1")
    assert chosen == [b"k1"]
    with SimpleConsumer(broker.bootstrap) as consumer:
        (m,) = list(consumer.fetch(topic, 3, 0))
    assert m.key == b"k1" and JsonDeserializer()(m.value) == {"a": [1, 2]}


def test_null_keys_stick_to_a_partition_per_batch(broker, topic):
    with Producer(broker.bootstrap, linger_ms=1000, batch_size=10_000) as producer:
        futures = [producer.send(topic, b"x" * 100) for _ in range(400)]
        producer.flush(10)
    parts = [f.result().partition for f in futures]
    runs = sum(1 for a, b in itertools.pairwise(parts) if a != b) + 1
    # ~82 records fill a 10 kB batch: a handful of runs, each on one partition, spread out
    assert 3 <= runs <= 10
    assert len(set(parts)) >= 2


def test_murmur2_matches_javas_known_values():
    # apache/kafka UtilsTest.testMurmur2 vectors
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        bytes([ord("a"), ord("b"), ord("c")]): 479470107,
    }
    for data, expected in cases.items():
        assert murmur2(data) == expected, data


def test_same_key_same_partition_across_clients(broker, topic):
    from confluent_kafka import Producer as ConfluentProducer
    from kafka import KafkaProducer

    keys = [b"user-%d" % i for i in range(40)] + [b"", b"\x00\xff", "ключ".encode()]
    with Producer(broker.bootstrap) as producer:
        ours = {k: producer.send(topic, b"pykfk", key=k).result(10).partition for k in keys}
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap)
    theirs_kp = {k: kp.send(topic, b"kafka-python", key=k).get(10).partition for k in keys}
    kp.close()
    delivered = {}
    cp = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for k in keys:
        cp.produce(
            topic,
            b"confluent",
            key=k,
            on_delivery=lambda err, msg: delivered.__setitem__(msg.key(), msg.partition()),
        )
    assert cp.flush(20) == 0
    assert ours == theirs_kp == {k: delivered[k] for k in keys}
    assert ours == {k: partition_for_key(k, 4) for k in keys}
    assert len(set(ours.values())) == 4
