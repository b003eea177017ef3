"""Partition reassignment with a real ZooKeeper and broker processes, driven through
kafka-python's KafkaAdminClient (AlterPartitionReassignments and
ListPartitionReassignments; confluent-kafka's AdminClient has neither) and raw requests:
a move from brokers [1, 2, 3] to [2, 3, 4] under a running acks=all producer, a move
listed while it waits, cancelled, and carried on by a new controller, bad targets, a
broker that is not the controller, a standalone broker, and the reassignment throttles."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import pytest
from confluent_kafka import KafkaError as ConfluentError
from kafka import TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import KafkaAdminClient

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient, wait_until
from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import high_watermarks, read_all, replica_bytes

ALTER_KEY, LIST_KEY = 45, 46


def create_topic_on(cluster: Cluster, name: str, assignment: dict[int, list[int]], **configs: str) -> None:
    """Write the topic's znodes with a chosen assignment, as Kafka's admin tools did
    through ZooKeeper; the controller then elects its leaders."""
    config_doc = {"version": 1, "config": configs}
    cluster.zk.create(cluster.path(f"/config/topics/{name}"), json.dumps(config_doc).encode())
    topic_doc = {"version": 2, "partitions": {str(p): r for p, r in assignment.items()},
                 "adding_replicas": {}, "removing_replicas": {}}
    cluster.zk.create(cluster.path(f"/brokers/topics/{name}"), json.dumps(topic_doc).encode())
    cluster.wait_for_full_isr(name, len(assignment), timeout=60)


def grow(bootstrap: str, topic: str, partitions: int) -> int | None:
    """CreatePartitions through confluent-kafka's AdminClient: None or the error code."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer comes
    future = admin.create_partitions([NewPartitions(topic, partitions)])[topic]
    try:
        future.result(30)
    except Exception as exc:  # noqa: BLE001 - the KafkaException carries the code
        return int(exc.args[0].code())
    return None


def admin_client(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


def listed_reassignments(bootstrap: str, timeout_s: float = 30.0) -> Any:
    """ListPartitionReassignments from a fresh admin client, asked again while the
    client's first view of the cluster is behind: just after a controller change it may
    name a controller whose registration that view does not hold yet (UnknownBrokerIdError),
    which a user retries."""
    deadline = time.monotonic() + timeout_s
    while True:
        admin = admin_client(bootstrap)
        try:
            return admin.list_partition_reassignments()
        except kafka_errors.UnknownBrokerIdError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        finally:
            admin.close()


def reassignment_done(cluster: Cluster, topic: str, target: list[int]) -> bool:
    data, _stat = cluster.zk.get(cluster.path(f"/brokers/topics/{topic}"))
    doc = json.loads(data)
    return (doc["partitions"]["0"] == target and not doc.get("adding_replicas") and not doc.get("removing_replicas")
            and cluster.isr(topic, 0) == sorted(target) and cluster.leader(topic, 0) in target)


class RunningProducer:
    """An idempotent acks=all producer sending numbered records until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 120000, "retry.backoff.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000})
        self.topic = topic
        self.acked: list[tuple[int, int]] = []  # (offset, sequence number)
        self.failed: list[Any] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer")

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failed.append(err)
        else:
            self.acked.append((msg.offset(), int(msg.value()[:12])))

    def _run(self) -> None:
        padding = b"x" * 200
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, value=b"%012d" % self.sent + padding, on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                self.producer.poll(0.05)
            if self.sent % 500 == 0:
                self.producer.poll(0.01)  # pacing: a steady stream, not a burst
        self.producer.flush(120)

    def start(self) -> RunningProducer:
        self._thread.start()
        return self

    def wait_for_acks(self, count: int, timeout: float) -> None:
        wait_until(lambda: len(self.acked) >= count, timeout, f"{count} acknowledged records")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(150)
        assert not self._thread.is_alive(), "the producer did not finish"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_move_under_acks_all_load_loses_nothing_and_copies_the_bytes(cluster_factory):
    cluster = cluster_factory(4, first_id=1)
    topic, tp = "moving", TopicPartition("moving", 0)
    create_topic_on(cluster, topic, {0: [1, 2, 3]}, **{"min.insync.replicas": "2"})
    producer = RunningProducer(cluster.bootstrap, topic).start()
    try:
        producer.wait_for_acks(20000, 60)
        admin = admin_client(cluster.bootstrap)
        try:
            assert admin.alter_partition_reassignments({tp: [2, 3, 4]}) == {tp: None}
            ongoing = admin.list_partition_reassignments()
            # Listed while broker 4 catches up (unless it was quicker than this request).
            assert ongoing in ({}, {tp: {"replicas": [2, 3, 4, 1], "adding_replicas": [4], "removing_replicas": [1]}})
            wait_until(lambda: reassignment_done(cluster, topic, [2, 3, 4]), 90, "the move to [2, 3, 4]")
            assert admin.list_partition_reassignments() == {}
        finally:
            admin.close()
        acked_at_move = len(producer.acked)
        producer.wait_for_acks(acked_at_move + 10000, 60)  # the new replica set takes writes
    finally:
        producer.stop()
    assert not producer.failed, producer.failed[:5]
    assert len(producer.acked) == producer.sent

    ends = high_watermarks(cluster.bootstrap, topic, 1)
    records = read_all(cluster.bootstrap, topic, ends)[0]
    # Every acknowledged record is there at its offset, once, in order.
    by_offset = {offset: int(value[:12]) for offset, value in records}
    for offset, seq in producer.acked:
        assert by_offset.get(offset) == seq, (offset, seq)
    seqs = [int(value[:12]) for _offset, value in records]
    assert seqs == list(range(producer.sent)), "records lost, duplicated or out of order"

    # The new replicas hold the same bytes up to the high watermark; broker 1 dropped its copy.
    copies = {b: replica_bytes(cluster, b, topic, 0, ends[0]) for b in (2, 3, 4)}
    assert len(copies[4]) > 1_000_000
    assert copies[4] == copies[2] == copies[3]
    wait_until(lambda: not os.path.exists(os.path.join(cluster.brokers[1].log_dir, f"{topic}-0")), 30,
               "broker 1 to delete its replica")


@pytest.mark.timeout(240)
def test_a_waiting_move_is_listed_cancelled_and_finished_by_the_next_controller(cluster_factory):
    # A longer session: a frozen broker stays registered while the test works with it.
    cluster = cluster_factory(4, first_id=1, zookeeper_session_timeout_ms=8000)
    controller = cluster.controller()
    others = sorted(set(cluster.brokers) - {controller})
    newcomer = others[-1]
    original, target = [controller, others[0], others[1]], [others[0], others[1], newcomer]
    topic, tp = "held", TopicPartition("held", 0)
    create_topic_on(cluster, topic, {0: original})
    bootstrap = ",".join(cluster.brokers[b].bootstrap for b in original)

    admin = admin_client(bootstrap)
    try:
        # A broker that does not exist: Kafka's code, and nothing changes.
        refused = admin.alter_partition_reassignments({tp: [others[0], others[1], 99]})
        assert refused == {tp: kafka_errors.InvalidReplicationAssignmentError}
        assert cluster.assignment(topic) == {0: original} and admin.list_partition_reassignments() == {}
        assert admin.alter_partition_reassignments({tp: None}) == {tp: kafka_errors.NoReassignmentInProgressError}

        # The newcomer is frozen: registered, but it cannot fetch, so the move waits.
        os.kill(cluster.brokers[newcomer].pid, signal.SIGSTOP)
        try:
            assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
            moving = {"replicas": target + [controller], "adding_replicas": [newcomer],
                      "removing_replicas": [controller]}
            assert admin.list_partition_reassignments() == {tp: moving}
            assert cluster.assignment(topic) == {0: target + [controller]}
            assert grow(bootstrap, topic, 2) == ConfluentError.REASSIGNMENT_IN_PROGRESS
            # Cancelled: back to the original replicas (in the order the move kept them).
            assert admin.alter_partition_reassignments({tp: None}) == {tp: None}
            assert admin.list_partition_reassignments() == {}
            assert cluster.assignment(topic) == {0: [others[0], others[1], controller]}
            # Again, and the controller dies while the move waits.
            assert admin.alter_partition_reassignments({tp: target}) == {tp: None}
            cluster.brokers[controller].kill()
            wait_until(lambda: cluster.controller() not in (-1, controller), 30, "a new controller")
        finally:
            os.kill(cluster.brokers[newcomer].pid, signal.SIGCONT)
    finally:
        admin.close()

    wait_until(lambda: reassignment_done(cluster, topic, target), 90, "the move finished by the new controller")
    assert listed_reassignments(cluster.brokers[others[0]].bootstrap) == {}
    # The old controller was down when its replica was removed: it deletes it when it starts.
    held_copy = os.path.join(cluster.brokers[controller].log_dir, f"{topic}-0")
    assert os.path.isdir(held_copy)
    cluster.brokers[controller].start(timeout=60)
    wait_until(lambda: not os.path.exists(held_copy), 30, "the removed replica deleted at start")


@pytest.mark.timeout(120)
def test_a_broker_that_is_not_the_controller_answers_not_controller(cluster_factory):
    cluster = cluster_factory(2)
    cluster.create_topic("t", 1, 2)
    other = cluster.brokers[next(b for b in cluster.brokers if b != cluster.controller())]
    raw = RawClient(other.host, other.port)
    try:
        alter = raw.call(ALTER_KEY, 0, {"timeout_ms": 1000, "topics": [
            {"name": "t", "partitions": [{"partition_index": 0, "replicas": [0, 1]}]}]})
        assert alter.error_code == ErrorCode.NOT_CONTROLLER and list(alter.responses) == []
        listed = raw.call(LIST_KEY, 0, {"timeout_ms": 1000, "topics": None})
        assert listed.error_code == ErrorCode.NOT_CONTROLLER
    finally:
        raw.close()


def test_a_standalone_broker_takes_only_itself_as_the_replica_set(pykfk_broker):
    admin = admin_client(pykfk_broker.bootstrap)
    try:
        from kafka.admin import NewTopic

        admin.create_topics([NewTopic("solo", 2, 1)])
        first, second = TopicPartition("solo", 0), TopicPartition("solo", 1)
        results = admin.alter_partition_reassignments({first: [0], second: [0, 1]})
        assert results == {first: None, second: kafka_errors.InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({first: None}) == {
            first: kafka_errors.NoReassignmentInProgressError}
        unknown = TopicPartition("solo", 9)
        assert admin.alter_partition_reassignments({unknown: [0]}) == {
            unknown: kafka_errors.UnknownTopicOrPartitionError}
        assert admin.list_partition_reassignments() == {}
    finally:
        admin.close()
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        # v1: a replication factor change refused when the client does not allow it.
        answer = raw.call(ALTER_KEY, 1, {"timeout_ms": 1000, "allow_replication_factor_change": False, "topics": [
            {"name": "solo", "partitions": [{"partition_index": 0, "replicas": [0, 0]}]}]})
        assert answer.error_code == ErrorCode.NONE
        assert answer.responses[0].partitions[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    finally:
        raw.close()


def log_bytes(cluster: Cluster, broker_id: int, topic: str) -> int:
    directory = os.path.join(cluster.brokers[broker_id].log_dir, f"{topic}-0")
    if not os.path.isdir(directory):
        return 0
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory) if n.endswith(".log"))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("throttled", [
    ("follower.replication.throttled.rate", 1),  # on the broker receiving the new replica
    ("leader.replication.throttled.rate", 0),  # on the leader sending it
])
def test_a_throttle_paces_a_move_and_a_dynamic_change_lifts_it(cluster_factory, throttled):
    setting, broker_id = throttled
    rate = 300_000  # bytes per second
    cluster = cluster_factory(2, **{setting.replace(".", "_"): rate})
    topic, tp = "paced", TopicPartition("paced", 0)
    create_topic_on(cluster, topic, {0: [0]})
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 20})
    for i in range(3000):
        producer.produce(topic, value=b"%06d" % i + b"y" * 994)
    assert producer.flush(60) == 0
    total = log_bytes(cluster, 0, topic)
    assert total > 3_000_000

    admin = admin_client(cluster.bootstrap)
    try:
        started = time.monotonic()
        assert admin.alter_partition_reassignments({tp: [0, 1]}) == {tp: None}
        wait_until(lambda: log_bytes(cluster, 1, topic) >= 1_200_000, 30, "broker 1 to copy 1.2 MB")
        # At 300 kB/s, with a second's worth as a burst and one fetch of debt, that takes
        # about 2 s (unthrottled, a fraction of a second).
        assert time.monotonic() - started >= 1.5
        assert admin.list_partition_reassignments() == {
            tp: {"replicas": [0, 1], "adding_replicas": [1], "removing_replicas": []}}
    finally:
        admin.close()

    # Lifting the throttle (a dynamic broker setting) lets the copy finish.
    configs = AdminClient({"bootstrap.servers": cluster.bootstrap})
    lifted = ConfigResource(ResourceType.BROKER, str(broker_id), incremental_configs=[ConfigEntry(
        setting, "1000000000", incremental_operation=AlterConfigOpType.SET)])
    configs.incremental_alter_configs([lifted])[lifted].result(30)
    wait_until(lambda: reassignment_done(cluster, topic, [0, 1]), 30, "the move to finish")
    ends = high_watermarks(cluster.bootstrap, topic, 1)
    assert replica_bytes(cluster, 1, topic, 0, ends[0]) == replica_bytes(cluster, 0, topic, 0, ends[0])
