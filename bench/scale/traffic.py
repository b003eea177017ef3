"""Produce to and consume from every partition with confluent-kafka (librdkafka)."""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

PROGRESS_EVERY_S = 2.0


def produce_all(bootstrap: str, topic: str, partitions: int, per_partition: int,
                value_size: int, say: Callable[[str], None]) -> float:
    """Seconds to produce ``per_partition`` records to every partition (acks=all)."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "error_cb": lambda e: errors.append(str(e))})
    value = b"x" * value_size
    start = last = time.perf_counter()
    sent = 0
    for i in range(per_partition):
        for p in range(partitions):
            while True:
                try:
                    producer.produce(topic, value, key=b"%d-%d" % (p, i), partition=p)
                    break
                except BufferError:
                    producer.poll(0.05)
            sent += 1
        producer.poll(0)
        if time.perf_counter() - last > PROGRESS_EVERY_S:
            last = time.perf_counter()
            say(f"  produced {sent:,} records")
    left = producer.flush(120)
    if left or errors:
        raise RuntimeError(f"produce: {left} undelivered, errors {errors[:3]}")
    return time.perf_counter() - start


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int,
                say: Callable[[str], None], on_poll: Callable[[], None],
                subscribe: bool = False) -> tuple[float, int, list[str], float]:
    """(seconds, records read, client errors, seconds until the consumer held every
    partition) for one consumer of the group "scale-bench" reading every partition: it
    reads from the group's committed offsets (the start of each partition the first time)
    and commits where it stopped, as a group member does, so the next call reads only what
    was produced since.

    By default the consumer is assigned every partition (``assign``: no rebalance, the
    group only stores offsets). With ``subscribe`` it subscribes to the topic and the
    group coordinator gives it every partition: each call is a member joining an empty
    group, a JoinGroup and SyncGroup whose assignment names every partition, and a
    LeaveGroup when it closes. The seconds count from the consumer's creation, the
    rebalance included (the broker's ``group.initial.rebalance.delay.ms`` as set)."""
    errors: list[str] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "scale-bench",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100, "error_cb": lambda e: errors.append(str(e))})
    start = last = time.perf_counter()
    assigned_at: list[float] = []
    if subscribe:
        def on_assign(c: Consumer, assignment: list[TopicPartition]) -> None:
            if len(assignment) != partitions:
                errors.append(f"assigned {len(assignment)} of {partitions} partitions")
            assigned_at.append(time.perf_counter())

        consumer.subscribe([topic], on_assign=on_assign)
    else:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        assigned_at.append(time.perf_counter())
    read = 0
    deadline = start + 300
    try:
        while read < expected and time.perf_counter() < deadline:
            for message in consumer.consume(10_000, 0.5):
                if message.error() is None:
                    read += 1
                elif message.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(str(message.error()))
            on_poll()
            if time.perf_counter() - last > PROGRESS_EVERY_S:
                last = time.perf_counter()
                say(f"  consumed {read:,} of {expected:,} records")
        if read:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assignment_s = assigned_at[0] - start if assigned_at else float("nan")
    return time.perf_counter() - start, read, errors, assignment_s
