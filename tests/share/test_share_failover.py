"""Share groups in a three-broker ZooKeeper cluster: the share-partition state follows
leadership. ShareConsumers accept part of a queue; the topic partition's leader is
killed with SIGKILL (its successor reads the state from the share coordinator), then the
share coordinator, the leader of the ``__share_group_state`` partition (its successor
reads the state topic). Every record is delivered and accepted, and none accepted before
a kill is delivered again."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient, wait_until
from tests.cluster.conftest import Cluster
from tests.cluster.test_reassignment import create_topic_on

TOPIC, GROUP, RECORDS = "fq", "fg", 60
STATE_TOPIC = "__share_group_state"
HOLDER = str(Path(__file__).with_name("share_holder.py"))


@pytest.fixture
def cluster(tmp_path: Any, zookeeper_server: Any) -> Iterator[Cluster]:
    made = Cluster(str(tmp_path / "cluster"), zookeeper_server, 3, {
        "offsets.topic.num.partitions": 1,
        "share.coordinator.state.topic.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": 3,
        "group.share.min.record.lock.duration.ms": 1000,
        "group.share.record.lock.duration.ms": 3000,
        "group.share.heartbeat.interval.ms": 500,
    })
    try:
        yield made.start()
    finally:
        made.close()


def _start_offset(cluster: Cluster, every_topic: bool = False) -> int | None:
    """The group's share-partition start offset, from its coordinator (None: not found);
    ``every_topic`` asks for all the group has state for (topics null)."""
    topics = None if every_topic else [{"topic_name": TOPIC, "partitions": [0]}]
    for broker in cluster.brokers.values():
        if not broker.is_running():
            continue
        raw = RawClient(broker.host, broker.port)
        try:
            answer = raw.call(90, 0, {"groups": [{"group_id": GROUP, "topics": topics}]}).groups[0]
        finally:
            raw.close()
        if answer.error_code == ErrorCode.NONE:
            rows = [(t.topic_name, p) for t in answer.topics for p in t.partitions]
            found = [p for name, p in rows if name == TOPIC and p.partition_index == 0]
            return found[0].start_offset if found and found[0].error_code == ErrorCode.NONE else None
    return None


class Queue:
    """Two share consumers accepting what they get; what each accept committed."""

    def __init__(self, bootstrap: str):
        self.consumers = [ShareConsumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "share.acknowledgement.mode": "explicit",
            "max.poll.records": 5, "topic.metadata.refresh.interval.ms": 1000}) for _ in range(2)]
        for consumer in self.consumers:
            consumer.subscribe([TOPIC])
        self.delivered: list[int] = []
        self.accepted: set[int] = set()  # accepts the broker confirmed

    def poll(self) -> None:
        for consumer in self.consumers:
            messages = [m for m in consumer.poll(0.2) or [] if m.error() is None]
            for message in messages:
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
            self.delivered += [m.offset() for m in messages]
            if not messages:
                continue
            try:
                consumer.commit_sync()
            except KafkaException:
                continue  # not confirmed (a leader moved): those may come again
            self.accepted.update(m.offset() for m in messages)

    def until(self, accepted: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.accepted) < accepted and time.monotonic() < deadline:
            self.poll()

    def close(self) -> None:
        for consumer in self.consumers:
            consumer.close()


def _kill_leader(cluster: Cluster, topic: str) -> int:
    victim = cluster.leader(topic, 0)
    cluster.brokers[victim].kill()  # SIGKILL
    wait_until(lambda: cluster.leader(topic, 0) not in (victim, -1), 30, f"a new leader of {topic}-0")
    return victim


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_leader_and_share_coordinator_kills_redeliver_only_unacknowledged_records(cluster):
    # The share coordinator on broker 0, the partition led by broker 1 and then by 2: the
    # leader reads and writes its state on another broker.
    create_topic_on(cluster, STATE_TOPIC, {0: [0, 1, 2]}, **{"cleanup.policy": "compact"})
    create_topic_on(cluster, TOPIC, {0: [1, 2, 0]}, **{"min.insync.replicas": "2"})
    assert (cluster.leader(TOPIC, 0), cluster.leader(STATE_TOPIC, 0)) == (1, 0)
    # The group config, set through any broker, reaches the partition's leader.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    earliest = ConfigResource(ConfigResource.Type.GROUP, GROUP, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([earliest])[earliest].result(20)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=b"%d" % i)
        if i % 5 == 4:
            producer.flush(10)  # several batches
    assert producer.flush(20) == 0
    queue = Queue(cluster.bootstrap)
    holder = None
    try:
        cluster.wait_for_full_isr(STATE_TOPIC, 1)

        queue.until(20, 30)
        assert len(queue.accepted) >= 20
        # A third member acquires records and holds them, unacknowledged, through the kill.
        holder = subprocess.Popen([sys.executable, HOLDER, cluster.bootstrap, GROUP, TOPIC],
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout is not None
        held = [int(o) for o in holder.stdout.readline().split()]
        assert held, "the holder got nothing"
        before_leader_kill = set(queue.accepted)
        seen_before = len(queue.delivered)
        victim = _kill_leader(cluster, TOPIC)
        assert (victim, cluster.leader(TOPIC, 0), cluster.leader(STATE_TOPIC, 0)) == (1, 2, 0)
        queue.until(40, 60)
        assert len(queue.accepted) >= 40, (len(queue.accepted), cluster.brokers[victim].log_tail())
        assert not before_leader_kill & set(queue.delivered[seen_before:]), "accepted records came again"

        cluster.brokers[victim].start(timeout=60)
        cluster.wait_for_full_isr(STATE_TOPIC, 1)
        cluster.wait_for_full_isr(TOPIC, 1)
        before_coordinator_kill = set(queue.accepted)
        seen_before = len(queue.delivered)
        assert _kill_leader(cluster, STATE_TOPIC) == 0
        assert (cluster.leader(TOPIC, 0), cluster.leader(STATE_TOPIC, 0)) == (2, 1)
        queue.until(RECORDS, 60)
        assert queue.accepted == set(range(RECORDS)), sorted(set(range(RECORDS)) - queue.accepted)
        assert not before_coordinator_kill & set(queue.delivered[seen_before:]), "accepted records came again"
        assert set(held) <= queue.accepted  # what the holder kept came to the others
        wait_until(lambda: _start_offset(cluster) == RECORDS, 20, "the start offset past every record")
        wait_until(lambda: _start_offset(cluster, every_topic=True) == RECORDS, 20,
                   "the start offset, asked with topics null")
    finally:
        if holder is not None:
            holder.kill()
            holder.wait(10)
        queue.close()
