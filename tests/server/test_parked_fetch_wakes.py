"""A parked Fetch (fewer than min_bytes available, waiting up to max_wait_ms) on a topic of
thousands of partitions: each wake-up (an append to one partition) re-reads that
partition, not all of them, and the answer still holds every partition with data; a real
consumer reading that way gets every record exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk._core import fetch_path
from pykfk.testing import RawClient

FETCH = 1
PARTITIONS = 2000
TOPIC = "wide"


def _create(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every partition led (created in the background)
        topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
        if len(topic.partitions) == PARTITIONS and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.2)
    raise AssertionError("the topic's partitions never all had a leader")


def _count_reads() -> Callable[[], int]:
    """The broker's per-partition fetch reads from now on (the compiled Fetch path counts
    each partition it reads, whichever way its limits came: ``fetch_path.counts``)."""
    before = sum(fetch_path.counts())
    return lambda: sum(fetch_path.counts()) - before


def test_a_parked_fetch_rereads_only_the_partitions_woken(broker):
    _create(broker.bootstrap)
    reads = _count_reads()
    appends = 20
    value = b"x" * 1000
    raw = RawClient(broker.host, broker.port, timeout=60)
    body = {"replica_id": -1, "max_wait_ms": 30_000, "min_bytes": appends * len(value) + 500,
            "max_bytes": 50 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for p in range(PARTITIONS)]}],
            "forgotten_topics_data": []}
    answer: list[object] = []
    fetcher = threading.Thread(target=lambda: answer.append(raw.call(FETCH, 11, body)))
    try:
        fetcher.start()
        deadline = time.monotonic() + 20
        while reads() < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.01)  # the first pass read every partition, then parked
        assert reads() == PARTITIONS
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
        woken = [(i * 97) % PARTITIONS for i in range(appends)]
        for partition in woken:  # one append, one wake-up at a time
            producer.produce(TOPIC, value, partition=partition)
            assert producer.flush(10) == 0
        fetcher.join(30)
        assert not fetcher.is_alive()
    finally:
        raw.close()
    # One full pass, then one read per wake-up (the old walk read all 2,000 per wake-up).
    assert reads() <= PARTITIONS + 2 * appends, reads()
    response = answer[0]
    with_data = {p.partition_index for t in response.responses for p in t.partitions if p.records}
    assert with_data == set(woken)
    assert len([p for t in response.responses for p in t.partitions]) == PARTITIONS
    assert all(p.error_code == 0 for t in response.responses for p in t.partitions)
    assert {p.partition_index: p.high_watermark for t in response.responses for p in t.partitions
            if p.partition_index in with_data} == dict.fromkeys(woken, 1)


def test_a_consumer_whose_fetches_park_reads_every_record_once(broker):
    _create(broker.bootstrap)
    reads = _count_reads()
    total = 600
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wide-readers",
                         "enable.auto.commit": False, "fetch.min.bytes": 200_000, "fetch.wait.max.ms": 3000,
                         "fetch.queue.backoff.ms": 0})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: list[bytes] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})

    def produce() -> None:
        for i in range(total):
            producer.produce(TOPIC, b"%06d" % i + b"." * 400, partition=(i * 7) % PARTITIONS)
            if i % 20 == 19:
                producer.flush(10)
                time.sleep(0.02)
        producer.flush(10)

    writer = threading.Thread(target=produce)
    try:
        writer.start()
        deadline = time.monotonic() + 90
        while len(seen) < total and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value()[:6])
        writer.join(30)
        end = time.monotonic() + 4  # anything more (a duplicate) would come now
        while time.monotonic() < end:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen.append(message.value()[:6])
    finally:
        consumer.close()
    assert sorted(seen) == [b"%06d" % i for i in range(total)]
    # Every fetch reads all 2,000 partitions once; a parked one then reads only those
    # appended to: about 8,600 reads here, where rereading all of them on every wake-up
    # took 104,000.
    assert reads() < PARTITIONS * 20, reads()
