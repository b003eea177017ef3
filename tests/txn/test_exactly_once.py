"""Exactly once across crashes: a consume-transform-produce loop (confluent-kafka,
``ctp_worker.py``) over 100,000 records, killed with SIGKILL at random points five times
and restarted with the same transactional.id. The output read with read_committed holds
every input record exactly once, in order per input partition, and the group's committed
offsets are the input's end offsets."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.txn.conftest import TIMEOUT_S, create_topics

PARTITIONS = 4
RECORDS = 100_000
KILLS = 5
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fill_input(bootstrap: str) -> list[int]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(RECORDS):
        while True:
            try:
                producer.produce("in", b"%d:%d" % (i % PARTITIONS, i // PARTITIONS), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(TIMEOUT_S) == 0
    return [RECORDS // PARTITIONS] * PARTITIONS


def start_worker(bootstrap: str, ends: list[int]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.txn.ctp_worker", bootstrap, "ctp-worker",
                             *map(str, ends)], cwd=REPO, stdout=subprocess.PIPE)


def read_output(bootstrap: str) -> dict[int, list[bytes]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "verifier", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([TopicPartition("out", p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    ended: set[int] = set()
    deadline = time.monotonic() + TIMEOUT_S * 2
    try:
        while len(ended) < PARTITIONS and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error():
                    ended.add(message.partition())
                else:
                    got[message.partition()].append(message.value())
    finally:
        consumer.close()
    assert len(ended) == PARTITIONS
    return got


def test_consume_transform_produce_is_exactly_once_across_kill_9(broker):
    create_topics(broker.bootstrap, PARTITIONS, "in", "out")
    ends = fill_input(broker.bootstrap)
    rng = random.Random(14)
    # Kill points: random counts of committed input records, rising.
    kill_at = sorted(rng.randrange(RECORDS // 10, RECORDS * 9 // 10) for _ in range(KILLS))
    for threshold in kill_at:
        worker = start_worker(broker.bootstrap, ends)
        reached = 0
        assert worker.stdout is not None
        while reached < threshold:  # ends with the worker's output (it exits or dies)
            line = worker.stdout.readline()
            assert line, f"the worker stopped at {reached} before its kill point {threshold}"
            reached = int(line)
        os.kill(worker.pid, signal.SIGKILL)  # mid-work: often between a produce and its commit
        worker.wait(TIMEOUT_S)
    assert sum(committed_offsets(broker.bootstrap)) < RECORDS
    worker = start_worker(broker.bootstrap, ends)
    assert worker.stdout is not None
    worker.stdout.read()  # until it exits: its progress lines are not needed
    assert worker.wait(TIMEOUT_S * 10) == 0

    output = read_output(broker.bootstrap)
    for partition in range(PARTITIONS):
        expected = [b"%d:%d!" % (partition, n) for n in range(ends[partition])]
        assert output[partition] == expected, f"partition {partition}: {len(output[partition])} records"
    assert committed_offsets(broker.bootstrap) == ends


def committed_offsets(bootstrap: str) -> list[int]:
    """The group's committed input offsets (0 where none), once no transaction holds them."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "isolation.level": "read_committed"})
    try:
        committed = consumer.committed([TopicPartition("in", p) for p in range(PARTITIONS)], timeout=TIMEOUT_S)
    finally:
        consumer.close()
    return [max(tp.offset, 0) for tp in committed]
