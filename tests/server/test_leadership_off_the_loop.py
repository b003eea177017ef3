"""A new topic's files and leader epoch files are made off the broker's event loop, and
what the epoch files say survives a kill -9 of the broker (real broker process,
confluent-kafka, the loop-stall monitor naming what blocked the loop)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.cluster.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache
from pykfk.server.loop_stalls import REPORT_ENV, STALL_MS_ENV
from pykfk.testing import BrokerProcess, wait_until

pytestmark = pytest.mark.timeout(90)

PARTITIONS = 8
# Work that used to block the loop while a topic was made.
FILE_WORK = ("LeaderEpochCache", "write_atomic", "create_log", "_open_segment", "Segment.__init__")


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    failed: list[object] = []
    for i in range(count):
        producer.produce(topic, b"v%d" % i, partition=i % PARTITIONS,
                         on_delivery=lambda err, _msg: failed.append(err) if err else None)
    assert producer.flush(30) == 0 and not failed, failed


def test_a_new_topic_is_made_off_the_loop_and_its_epochs_survive_a_kill(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    report = tmp_path / "stalls.json"
    monkeypatch.setenv(STALL_MS_ENV, "2")
    monkeypatch.setenv(REPORT_ENV, str(report))
    broker = BrokerProcess(str(tmp_path / "data"), log_level="WARNING").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("t", PARTITIONS, 1)])["t"].result(30)
        _produce(broker.bootstrap, "t", 80)
        wait_until(report.exists, 10, "the loop-stall report")
        stalls = json.loads(report.read_text())
        blocked = [s for s in stalls["worst"] if any(name in s["at"] for name in FILE_WORK)]
        assert not blocked, blocked

        broker.kill()  # SIGKILL: no clean shutdown, nothing flushed at stop
        dirs = [tmp_path / "data" / f"t-{p}" for p in range(PARTITIONS)]
        assert all(LeaderEpochCache(str(d)).entries == [(0, 0)] for d in dirs), \
            [(d / CHECKPOINT_FILE).read_text() for d in dirs]
        broker.start()
        _produce(broker.bootstrap, "t", 80)  # leads again at the epoch on file
        assert all(LeaderEpochCache(str(d)).entries == [(0, 0)] for d in dirs)
    finally:
        broker.stop()
