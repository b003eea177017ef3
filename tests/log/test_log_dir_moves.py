"""AlterReplicaLogDirs: a partition moved between two log dirs of a broker while a
confluent-kafka producer writes to it with acks=all loses nothing; DescribeLogDirs shows
the future replica during the move; every record is readable after the move and after a
restart; bad targets get Kafka's error codes."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, InProcessBroker, RawClient

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
TOPIC = "moving"


def _alter_request(path: str, topic: str = TOPIC) -> dict[str, Any]:
    return {"dirs": [{"path": path, "topics": [{"name": topic, "partitions": [0]}]}]}


def _placement(raw: RawClient) -> dict[str, list[bool]]:
    """log dir -> is_future_key of each replica of the topic's partition 0 there."""
    answer: Any = raw.call(DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": TOPIC, "partitions": [0]}]})
    return {result.log_dir: [p.is_future_key for t in result.topics for p in t.partitions]
            for result in answer.results if result.topics}


def _read_all(broker: InProcessBroker | BrokerProcess, count: int, topic: str = TOPIC) -> list[bytes]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": f"{broker.host}:{broker.port}",
                                         "group.id": f"reader-{time.monotonic_ns()}",
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    values.append(message.value())
    finally:
        consumer.close()
    return values


def test_a_partition_moves_between_log_dirs_under_acks_all_writes(tmp_path: Path) -> None:
    dirs = [str(tmp_path / name) for name in ("a", "b", "c")]
    settings = {"log.dirs": ",".join(dirs), "num.partitions": 1, "offsets.topic.replication.factor": 1}
    broker = InProcessBroker(dirs[0], settings).start()
    acked: list[bytes] = []
    errors: list[str] = []
    try:
        producer = confluent_kafka.Producer({"bootstrap.servers": f"{broker.host}:{broker.port}", "acks": "all",
                                             "enable.idempotence": True, "linger.ms": 2})

        def delivered(err: Any, message: Any) -> None:
            if err is None:
                acked.append(message.value())
            else:
                errors.append(str(err))

        for i in range(6000):  # ~6 MiB before the move: the copy takes a while
            producer.produce(TOPIC, f"{i:08d}".encode() + b"x" * 1000, on_delivery=delivered)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
        raw = RawClient(broker.host, broker.port)
        (source,) = _placement(raw)
        target = next(d for d in dirs[:2] if os.path.abspath(d) != source)

        stop = threading.Event()

        def keep_producing() -> None:
            n = 6000
            while not stop.is_set():
                producer.produce(TOPIC, f"{n:08d}".encode(), on_delivery=delivered)
                producer.poll(0.001)
                n += 1
            producer.flush(30)

        writer = threading.Thread(target=keep_producing)
        writer.start()
        try:
            time.sleep(0.3)
            answer: Any = raw.call(ALTER_REPLICA_LOG_DIRS, 2, _alter_request(target))
            assert answer.results[0].partitions[0].error_code == ErrorCode.NONE
            seen = [_placement(raw)]  # read at once: the copy of ~6 MiB is under way
            deadline = time.monotonic() + 20
            while seen[-1] != {os.path.abspath(target): [False]} and time.monotonic() < deadline:
                time.sleep(0.05)
                seen.append(_placement(raw))
            assert {source: [False], os.path.abspath(target): [True]} in seen, seen[:3]
            assert seen[-1] == {os.path.abspath(target): [False]}
            assert not os.path.exists(os.path.join(source, f"{TOPIC}-0"))
            time.sleep(0.5)  # writes go on after the swap
        finally:
            stop.set()
            writer.join(60)
        assert not errors and len(acked) > 6000
        assert _read_all(broker, len(acked)) == acked

        # Bad targets, as Kafka answers them.
        def code(request: dict[str, Any]) -> int:
            reply: Any = raw.call(ALTER_REPLICA_LOG_DIRS, 2, request)
            return int(reply.results[0].partitions[0].error_code)

        assert code(_alter_request(str(tmp_path / "not-a-log-dir"))) == ErrorCode.LOG_DIR_NOT_FOUND
        assert code(_alter_request(dirs[0], "no-such-topic")) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        manager = broker.broker.replica_manager.log_manager
        broker.call(lambda: _offline(manager, os.path.abspath(dirs[2])))
        assert code(_alter_request(dirs[2])) == ErrorCode.KAFKA_STORAGE_ERROR
        raw.close()
    finally:
        broker.stop()

    again = InProcessBroker(dirs[0], settings).start()
    try:
        raw = RawClient(again.host, again.port)
        assert _placement(raw) == {os.path.abspath(target): [False]}
        raw.close()
        assert _read_all(again, len(acked)) == acked
    finally:
        again.stop()


async def _offline(manager: Any, log_dir: str) -> None:
    """The dir fails as an I/O error takes one offline."""
    manager.report_dir_error(log_dir, OSError(errno.EIO, "Input/output error"), offline=True)
