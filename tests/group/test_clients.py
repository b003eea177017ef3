"""Real group consumers (kafka-python and confluent-kafka) against an in-process broker: the
server's group handlers, the broker's coordinator and its ``__consumer_offsets`` logs, with
the coordinator reachable from the test for white-box checks (state, reload from the log).
The same scenario against broker processes, with kill -9, is tests/compat/test_groups.py.
"""

from __future__ import annotations

import struct
import threading
import time

import confluent_kafka
import kafka
import pytest

from pykfk import testing
from pykfk.group.storage import LogOffsetsLog
from pykfk.testing import wait_until

pytestmark = pytest.mark.slow

TOPIC = "orders"
PARTITIONS = 12
RECORDS = 600
OFFSETS_PARTITIONS = 3
TIMEOUT_S = 60


@pytest.fixture
def broker(tmp_path):
    inproc = testing.InProcessBroker(str(tmp_path / "data"), {
        "group.initial.rebalance.delay.ms": 200,
        "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    }).start()

    async def setup():
        await inproc.broker.topics.create_topic(TOPIC, PARTITIONS, 1, {})
        await inproc.broker.ensure_offsets_topic()

    inproc.call(setup)
    yield inproc
    inproc.stop()
    assert not inproc.loop_errors, inproc.loop_errors


class Member(threading.Thread):
    """One group consumer polling in its own thread, recording what it sees."""

    def __init__(self, kind: str, bootstrap: str, seen: dict):
        super().__init__(daemon=True)
        self.kind, self.bootstrap, self.seen = kind, bootstrap, seen
        self.assignment: set[int] = set()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self):
        try:
            self._run_kafka_python() if self.kind == "kp" else self._run_confluent()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc

    def _record(self, partition: int, offset: int):
        self.seen.setdefault((partition, offset), self.kind)

    def _run_kafka_python(self):
        consumer = kafka.KafkaConsumer(
            TOPIC, bootstrap_servers=self.bootstrap, group_id="mix",
            auto_offset_reset="earliest", enable_auto_commit=True, auto_commit_interval_ms=300,
            session_timeout_ms=6000, heartbeat_interval_ms=300)
        try:
            while not self.stop_event.is_set():
                for records in consumer.poll(timeout_ms=1000).values():
                    for r in records:
                        self._record(r.partition, r.offset)
                self.assignment = {tp.partition for tp in consumer.assignment()}
            consumer.commit()
        finally:
            consumer.close()

    def _run_confluent(self):
        consumer = confluent_kafka.Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": "mix",
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "auto.commit.interval.ms": 300, "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300})
        try:
            consumer.subscribe([TOPIC])
            while not self.stop_event.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    self._record(msg.partition(), msg.offset())
                self.assignment = {tp.partition for tp in consumer.assignment()}
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()


def _produce(bootstrap: str):
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(RECORDS):
        producer.send(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS)
    producer.flush()
    producer.close()


def test_mixed_group_shares_partitions_commits_and_survives_reload(broker):
    _produce(broker.bootstrap)
    seen: dict = {}
    members = [Member(kind, broker.bootstrap, seen) for kind in ("kp", "kp", "ck")]
    for m in members:
        m.start()
    try:
        wait_until(lambda: len(seen) == RECORDS and all(len(m.assignment) == 4 for m in members)
              or any(m.error for m in members), TIMEOUT_S, "every record and an even 4/4/4 split")
        assert not [m.error for m in members if m.error]
        assignments = [m.assignment for m in members]
        assert set().union(*assignments) == set(range(PARTITIONS))  # each partition once
        assert {kind for kind in seen.values()} == {"kp", "ck"}

        coordinator = broker.broker.group_coordinator
        described = broker.call(lambda: coordinator.describe_groups(["mix"]))["groups"][0]
        assert described["group_state"] == "Stable"
        assert sorted(m["client_id"].split("-")[0] for m in described["members"]) == [
            "kafka", "kafka", "rdkafka"]
        assert all(m["member_assignment"] for m in described["members"])

        def all_committed():
            fetched = broker.call(lambda: coordinator.offset_fetch("mix", None))
            offsets = {p["partition_index"]: p["committed_offset"]
                       for t in fetched["topics"] for p in t["partitions"]}
            return offsets == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
        wait_until(all_committed, TIMEOUT_S, "committed offsets at the end of every partition")
    finally:
        for m in members:
            m.stop_event.set()
        for m in members:
            m.join(30)

    # Everyone left: the group is Empty, and its offsets come back from the log after the
    # coordinator unloads and reloads its partitions (what a broker restart does).
    coordinator = broker.broker.group_coordinator
    def group_state():
        return broker.call(lambda: coordinator.list_groups())["groups"][0]["group_state"]
    wait_until(lambda: group_state() == "Empty", TIMEOUT_S, "the group to become empty")

    async def reload():
        logs = {p: LogOffsetsLog(broker.broker.log_manager.get_log("__consumer_offsets", p))
                for p in range(OFFSETS_PARTITIONS)}
        for p in range(OFFSETS_PARTITIONS):
            await coordinator.unload_partition(p)
        assert coordinator.group("mix") is None
        for p, offsets_log in logs.items():
            await coordinator.load_partition(p, offsets_log)
        return await coordinator.offset_fetch("mix", None)

    fetched = broker.call(reload)
    assert {p["partition_index"]: p["committed_offset"]
            for t in fetched["topics"] for p in t["partitions"]} == {
        p: RECORDS // PARTITIONS for p in range(PARTITIONS)}

    # A consumer restarted in the group resumes after the committed offsets: nothing new.
    consumer = kafka.KafkaConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id="mix",
                                   auto_offset_reset="earliest", enable_auto_commit=False)
    try:
        got = []
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline and not consumer.assignment():
            got += [r for rs in consumer.poll(timeout_ms=200).values() for r in rs]
        got += [r for rs in consumer.poll(timeout_ms=1000).values() for r in rs]
        assert len(consumer.assignment()) == PARTITIONS
        assert got == []
    finally:
        consumer.close()


def _subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0: version int16, topics [string], user_data bytes."""
    name = topic.encode()
    return (struct.pack(">hi", 0, 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 0))


def test_silent_member_is_expelled_and_a_late_joiner_gets_partitions(broker):
    _produce(broker.bootstrap)
    coordinator = broker.broker.group_coordinator
    coordinator.config.group_min_session_timeout_ms = 1000
    seen: dict = {}
    members = [Member("kp", broker.bootstrap, seen) for _ in range(2)]
    for m in members:
        m.start()
    try:
        wait_until(lambda: [len(m.assignment) for m in members] == [6, 6], TIMEOUT_S, "a 6/6 split")

        # A member that joins, takes its share, then dies without a word (kill -9).
        async def ghost():
            join = await coordinator.join_group(
                "mix", "", "consumer", [("range", _subscription(TOPIC))],
                session_timeout_ms=1500, rebalance_timeout_ms=10_000, client_id="ghost")
            sync = await coordinator.sync_group("mix", join["generation_id"], join["member_id"])
            return join, sync

        join, sync = broker.call(ghost)
        assert join["error_code"] == 0 and sync["error_code"] == 0 and sync["assignment"]
        wait_until(lambda: [len(m.assignment) for m in members] == [4, 4], TIMEOUT_S, "a 4/4/4 split with the ghost")
        # Its session runs out; the live members take its partitions back.
        wait_until(lambda: [len(m.assignment) for m in members] == [6, 6], TIMEOUT_S, "the ghost to be expelled")
        assert coordinator.group("mix").generation_id >= 3

        late = Member("ck", broker.bootstrap, seen)
        members.append(late)
        late.start()
        wait_until(lambda: sorted(len(m.assignment) for m in members) == [4, 4, 4]
              and set().union(*(m.assignment for m in members)) == set(range(PARTITIONS)), TIMEOUT_S, "the late joiner to get its share")
        wait_until(lambda: len(seen) == RECORDS, TIMEOUT_S, "every record")
        assert not [m.error for m in members if m.error]
    finally:
        for m in members:
            m.stop_event.set()
        for m in members:
            m.join(30)
