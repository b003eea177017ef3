"""A move between log dirs (AlterReplicaLogDirs) cut by a SIGKILL of the broker is
resumed when the broker starts again, as Kafka resumes its future logs: the future dir
survives the crash, DescribeLogDirs shows the future replica again after the restart,
the move completes, and every acknowledged record is read back from the new dir. The
copy is held to ``replica.alter.log.dirs.io.max.bytes.per.second`` so the kill lands
in the middle of it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import confluent_kafka

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient, wait_until

from .test_log_dir_moves import _read_all

ALTER_REPLICA_LOG_DIRS, DESCRIBE_LOG_DIRS = 34, 35
TOPIC = "resumed"
RATE = 3 << 20  # bytes per second the copy may take
RECORDS = 9000  # of ~1 KiB: ~9 MiB, three seconds of copying


def _placement(broker: BrokerProcess) -> dict[str, list[bool]]:
    """log dir -> is_future_key of each replica of the topic's partition 0 there."""
    raw = RawClient(broker.host, broker.port)
    try:
        answer: Any = raw.call(DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": TOPIC, "partitions": [0]}]})
    finally:
        raw.close()
    return {result.log_dir: [p.is_future_key for t in result.topics for p in t.partitions]
            for result in answer.results if result.topics}


def _future_dirs(log_dir: str) -> list[str]:
    return [name for name in os.listdir(log_dir) if name.startswith(f"{TOPIC}-0.") and name.endswith("-future")]


def test_a_move_cut_by_a_crash_is_resumed_at_the_next_start(tmp_path: Path) -> None:
    dirs = [os.path.abspath(tmp_path / name) for name in ("a", "b")]
    broker = BrokerProcess(dirs[0], {"log.dirs": ",".join(dirs), "num.partitions": 1,
                                     "offsets.topic.replication.factor": 1, "log.segment.bytes": 1 << 20,
                                     "replica.alter.log.dirs.io.max.bytes.per.second": RATE})
    broker.start()
    try:
        acked: list[bytes] = []
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                                             "enable.idempotence": True, "linger.ms": 5})
        for i in range(RECORDS):
            producer.produce(TOPIC, f"{i:08d}".encode() + b"x" * 1000,
                             on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0 and len(acked) == RECORDS
        (source,) = _placement(broker)
        target = next(d for d in dirs if d != source)

        raw = RawClient(broker.host, broker.port)
        answer: Any = raw.call(ALTER_REPLICA_LOG_DIRS, 2, {"dirs": [
            {"path": target, "topics": [{"name": TOPIC, "partitions": [0]}]}]})
        raw.close()
        assert answer.results[0].partitions[0].error_code == ErrorCode.NONE
        assert _placement(broker) == {source: [False], target: [True]}
        time.sleep(1.0)  # a third of the copy
        broker.kill()

        (future,) = _future_dirs(target)
        copied = sum(entry.stat().st_size for entry in os.scandir(os.path.join(target, future)))
        assert 0 < copied < RECORDS * 1000, copied
        assert os.path.isdir(os.path.join(source, f"{TOPIC}-0"))

        broker.start()
        # The move goes on from the copy the crash left: the future replica is shown again.
        assert _placement(broker) == {source: [False], target: [True]}
        assert "Resuming the move of resumed-0" in broker.log_text()
        wait_until(lambda: _placement(broker) == {target: [False]}, 30, "the resumed move to complete")
        assert not _future_dirs(target) and not os.path.exists(os.path.join(source, f"{TOPIC}-0"))
        assert _read_all(broker, RECORDS, TOPIC) == acked
        # It stays where it moved across a clean restart.
        broker.restart()
        assert _placement(broker) == {target: [False]}
        assert _read_all(broker, RECORDS, TOPIC) == acked
    finally:
        broker.stop()
