"""Replication with a real ZooKeeper and three broker processes: acks=all under leader
crashes, the ISR and min.insync.replicas, replicas identical up to the high watermark."""

from __future__ import annotations

import os
import re
import struct
import threading
import time
from typing import Any

import pytest

from pykfk.testing import wait_until
from tests.cluster.conftest import Cluster

_SEGMENT = re.compile(r"^\d{20}\.log$")


def replica_bytes(cluster: Cluster, broker_id: int, topic: str, partition: int, high_watermark: int) -> bytes:
    """The batches of a replica's log below ``high_watermark``, segment files in offset
    order (batch layout: base_offset int64, batch_length int32, then batch_length bytes)."""
    directory = os.path.join(cluster.brokers[broker_id].log_dir, f"{topic}-{partition}")
    out = bytearray()
    for name in sorted(n for n in os.listdir(directory) if _SEGMENT.match(n)):
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        pos = 0
        while pos + 12 <= len(data):
            base_offset, length = struct.unpack_from(">qi", data, pos)
            if base_offset >= high_watermark or pos + 12 + length > len(data):
                return bytes(out)
            out += data[pos : pos + 12 + length]
            pos += 12 + length
    return bytes(out)


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-probe", "enable.auto.commit": False})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, ends: dict[int, int], timeout: float = 60) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of each partition from offset 0 up to ``ends[p]``: (offset, value)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify", "enable.auto.commit": False,
                         "fetch.max.bytes": 4 * 1024 * 1024})
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in ends}
    deadline = time.monotonic() + timeout
    try:
        while any((got[p][-1][0] + 1 if got[p] else 0) < ends[p] for p in ends):
            assert time.monotonic() < deadline, "timed out reading the topic back"
            for message in consumer.consume(10000, timeout=1):
                assert message.error() is None, message.error()
                got[message.partition()].append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_acks_all_survives_leader_kills(cluster_factory):
    cluster = cluster_factory(3)
    topic, partitions, total = "chaos", 4, 200_000
    cluster.create_topic(topic, partitions, 3, **{"min.insync.replicas": 2})
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": cluster.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 10,
        "message.timeout.ms": 180000,
        "retry.backoff.ms": 100,
        "topic.metadata.refresh.interval.ms": 1000,
    })
    acked: list[tuple[int, int, int]] = []  # (partition, offset, sequence number)
    failed: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), int(msg.value())))

    pace_s = 24.0  # spread the sends so that several leader kills land in the middle

    def produce_all() -> None:
        started = time.monotonic()
        for seq in range(total):
            if seq % 1000 == 0:
                ahead = started + pace_s * seq / total - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
            while True:
                try:
                    producer.produce(topic, key=b"key-%d" % (seq % 997), value=b"%d" % seq, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)
            if seq % 2000 == 0:
                producer.poll(0)
        producer.flush(240)

    sender = threading.Thread(target=produce_all, name="producer")
    sender.start()
    kills = 0
    while sender.is_alive() and kills < 6:
        time.sleep(1.5)  # pacing: leader kills spread over the produce run
        if not sender.is_alive():
            break
        victim = cluster.leader(topic, kills % partitions)
        if victim < 0:
            continue
        broker = cluster.brokers[victim]
        broker.kill()  # SIGKILL
        kills += 1
        broker.start(timeout=60)  # waits for its previous session to expire, then registers
    sender.join(260)
    assert not sender.is_alive(), "producer did not finish"
    assert kills >= 3, "the producer finished before the leaders could be killed"
    assert not failed, failed[:5]
    assert len(acked) == total

    cluster.wait_for_full_isr(topic, partitions, timeout=90)
    ends = high_watermarks(cluster.bootstrap, topic, partitions)
    records = read_all(cluster.bootstrap, topic, ends)

    # Every acknowledged record is there, at its offset, once, in order per partition.
    by_position = {(p, offset): int(value) for p, rows in records.items() for offset, value in rows}
    for partition, offset, seq in acked:
        assert by_position.get((partition, offset)) == seq, (partition, offset, seq)
    all_seqs = [int(value) for rows in records.values() for _offset, value in rows]
    assert len(all_seqs) == len(set(all_seqs)) == total, "duplicates or extras in the log"
    for partition, rows in records.items():
        seqs = [int(value) for _offset, value in rows]
        assert seqs == sorted(seqs), f"partition {partition} out of order"

    # All replicas hold the same bytes below the high watermark.
    for partition in range(partitions):
        hw = ends[partition]
        copies = {b: replica_bytes(cluster, b, topic, partition, hw) for b in cluster.brokers}
        reference = copies[cluster.leader(topic, partition)]
        assert len(reference) > 0
        for broker_id, data in copies.items():
            assert data == reference, f"replica on broker {broker_id} differs in {topic}-{partition}"


@pytest.mark.timeout(180)
def test_acks_all_needs_min_insync_replicas(cluster_factory):
    cluster = cluster_factory(3)
    topic = "isr"
    cluster.create_topic(topic, 1, 3, **{"min.insync.replicas": 2})
    from confluent_kafka import KafkaError, Producer

    def send(acks: str, values: list[bytes]) -> list[Any]:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "enable.idempotence": False,
                             "retries": 0, "message.timeout.ms": 10000})
        results: list[Any] = []
        for value in values:
            producer.produce(topic, value=value, on_delivery=lambda err, msg: results.append(err or msg.offset()))
        assert producer.flush(20) == 0
        return results

    before = send("all", [b"before-%d" % i for i in range(100)])
    assert all(isinstance(r, int) for r in before), before

    leader = cluster.leader(topic, 0)
    followers = [b for b in cluster.brokers if b != leader]
    for broker_id in followers:
        assert cluster.brokers[broker_id].stop() == 0
    wait_until(lambda: cluster.isr(topic, 0) == [leader], 30, "the ISR to shrink to the leader")

    refused = send("all", [b"refused"])
    assert len(refused) == 1 and refused[0].code() == KafkaError.NOT_ENOUGH_REPLICAS, refused
    accepted = send("1", [b"acks-1"])
    assert isinstance(accepted[0], int)

    for broker_id in followers:
        cluster.brokers[broker_id].start(timeout=60)
    wait_until(lambda: len(cluster.isr(topic, 0)) == 3, 60, "the ISR to grow back")
    after = send("all", [b"after"])
    assert isinstance(after[0], int)

    ends = high_watermarks(cluster.bootstrap, topic, 1)
    values = [v for _o, v in read_all(cluster.bootstrap, topic, ends)[0]]
    assert values == [b"before-%d" % i for i in range(100)] + [b"acks-1", b"after"]


@pytest.mark.timeout(180)
def test_appends_wake_follower_fetches_and_the_high_watermark_wakes_consumers(cluster_factory):
    """With every long poll set to 20 s, an acks=all produce and a consumer fetch parked
    on the leader both finish long before that: followers are woken by the append (and
    report their position as they ask for more), the consumer by the high watermark."""
    import asyncio

    from confluent_kafka import Producer

    from pykfk.cluster.channel import BrokerChannel

    long_poll_ms = 20_000
    cluster = cluster_factory(3, replica_fetch_wait_max_ms=long_poll_ms)
    topic = "wake"
    cluster.create_topic(topic, 1, 3, **{"min.insync.replicas": 3})
    cluster.wait_for_full_isr(topic, 1)
    leader = cluster.brokers[cluster.leader(topic, 0)]

    def produce_one() -> tuple[Any, float]:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 60_000})
        producer.list_topics(topic, timeout=10)  # metadata first: time only the produce
        results: list[Any] = []
        started = time.monotonic()
        producer.produce(topic, value=b"wake up", on_delivery=lambda err, msg: results.append(err or msg.offset()))
        assert producer.flush(60) == 0
        return results[0], time.monotonic() - started

    async def scenario() -> tuple[Any, float, Any, float]:
        channel = BrokerChannel(leader.host, leader.port, client_id="wake-test", timeout_s=60)
        fetch = {"replica_id": -1, "max_wait_ms": long_poll_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                 "isolation_level": 0, "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [],
                 "rack_id": "", "topics": [{"topic": topic, "partitions": [
                     {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                      "partition_max_bytes": 1 << 20}]}]}
        try:
            # The ISR is full from the topic's creation: wait until the leader has taken
            # its leadership (a fetch that does not wait is answered without error).
            for _ in range(100):
                probe = await channel.request(1, 11, {**fetch, "max_wait_ms": 0}, timeout_s=10)
                if probe.responses[0].partitions[0].error_code == 0:
                    break
                await asyncio.sleep(0.1)
            started = time.monotonic()
            parked = asyncio.ensure_future(channel.request(1, 11, fetch, timeout_s=60))
            await asyncio.sleep(0.5)  # the window in which the fetch must stay parked
            assert not parked.done(), "the consumer fetch should wait for data"
            delivered, produce_s = await asyncio.get_running_loop().run_in_executor(None, produce_one)
            response = await parked
            return delivered, produce_s, response, time.monotonic() - started
        finally:
            channel.close()

    delivered, produce_s, response, fetch_s = asyncio.run(scenario())
    assert delivered == 0, delivered
    assert produce_s < long_poll_ms / 2000, f"acks=all took {produce_s:.1f} s: followers were not woken"
    result = response.responses[0].partitions[0]
    assert result.error_code == 0 and result.high_watermark == 1
    assert b"wake up" in bytes(result.records)
    assert fetch_s < long_poll_ms / 2000, f"consumer fetch took {fetch_s:.1f} s: not woken by the high watermark"
