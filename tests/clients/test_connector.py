"""ConsumerConnector in both group modes: the broker's group coordinator and the seeds'
ZooKeeper registry (a real ZooKeeper server; the standalone broker is registered under
/brokers/ids as a ZooKeeper-mode broker registers itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from pykfk.consumer import Blacklist, ConsumerConnector, Whitelist
from pykfk.producer import Producer
from pykfk.testing import wait_until

from .conftest import BROKER_OVERRIDES, register_broker

FAST = {
    "auto_offset_reset": "smallest",
    "heartbeat_interval_ms": 200,
    "session_timeout_ms": 2000,
    "zk_session_timeout_ms": 1500,
    "rebalance_backoff_ms": 300,
    "rebalance_max_retries": 20,
    "topic_refresh_interval_ms": 300,
    "auto_commit_interval_ms": 300,
    "consumer_timeout_ms": 200,
    "fetch_wait_max_ms": 50,
}


class GroupEnv:
    def __init__(self, mode: str, bootstrap: str, zk: str | None):
        self.mode = mode
        self.bootstrap = bootstrap
        self.zk = zk

    @property
    def address(self) -> str:
        return self.bootstrap if self.mode == "broker" else str(self.zk)

    def connector(self, group: str, **options: Any) -> ConsumerConnector:
        kwargs = {**FAST, **options}
        if self.mode == "broker":
            return ConsumerConnector(group, self.bootstrap, **kwargs)
        return ConsumerConnector(group, zk_connect=self.zk, **kwargs)


def make_env(request: Any, broker: Any) -> GroupEnv:
    if request.param == "broker":
        return GroupEnv("broker", broker.bootstrap, None)
    zk = request.getfixturevalue("zk_chroot")
    session = register_broker(zk, broker)
    request.addfinalizer(lambda: (session.stop(), session.close()))
    return GroupEnv("zookeeper", broker.bootstrap, zk)


@pytest.fixture(params=["broker", "zookeeper"])
def env(request, broker) -> GroupEnv:
    return make_env(request, broker)


class Collector:
    """Drains streams on threads until stopped; keeps (topic, partition, offset, value)."""

    def __init__(self, streams: list) -> None:
        self.items: list[tuple] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._drain, args=(s,), daemon=True) for s in streams
        ]
        for t in self._threads:
            t.start()

    def _drain(self, stream: Any) -> None:
        while not self._stop.is_set():
            for m in stream:  # ends after consumer_timeout_ms without messages
                with self._lock:
                    self.items.append((m.topic, m.partition, m.offset, m.value))
                if self._stop.is_set():
                    return

    def values(self) -> set[bytes]:
        with self._lock:
            return {item[3] for item in self.items}

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)


def produce(bootstrap: str, topic: str, values: list[bytes], partitions: int = 4) -> None:
    with Producer(bootstrap, linger_ms=2) as producer:
        for i, v in enumerate(values):
            producer.send(topic, v, partition=i % partitions)


def test_two_connectors_split_partitions_then_one_shuts_down(env, topic):
    first = [b"a%d" % i for i in range(200)]
    produce(env.bootstrap, topic, first)
    group = f"g-{uuid.uuid4().hex[:8]}"
    c1 = env.connector(group)
    col1 = Collector(c1.create_message_streams({topic: 2})[topic])
    c2 = env.connector(group)
    col2 = Collector(c2.create_message_streams({topic: 1})[topic])
    try:
        # broker mode: two members, 2 partitions each; ZooKeeper mode: three consumer
        # threads (c1 has two streams), so c1 takes 3 partitions and c2 one
        expected = (2, 2) if env.mode == "broker" else (3, 1)
        wait_until(lambda: (
                (len(c1.assignment()), len(c2.assignment())) == expected
                and set(c1.assignment()) | set(c2.assignment()) == {(topic, p) for p in range(4)}
            ), 30, "the partitions split", 0.05)
        wait_until(lambda: col1.values() | col2.values() >= set(first), 30, "all of the first records", 0.05)
        c2.shutdown()
        second = [b"b%d" % i for i in range(200)]
        produce(env.bootstrap, topic, second)
        wait_until(lambda: len(c1.assignment()) == 4, 30, "c1 owning every partition", 0.05)
        wait_until(lambda: col1.values() >= set(second), 30, "c1 reading everything new", 0.05)
        # ranges: each member held a contiguous pair of partitions
        got = col1.values() | col2.values()
        assert got == set(first) | set(second)
    finally:
        col1.stop()
        col2.stop()
        c1.shutdown()
        c2.shutdown()


def test_killed_member_is_taken_over_without_loss(env, topic, tmp_path):
    values = [b"v%04d" % i for i in range(400)]
    produce(env.bootstrap, topic, values)
    group = f"g-{uuid.uuid4().hex[:8]}"
    out = tmp_path / "consumed.txt"
    script = os.path.join(os.path.dirname(__file__), "consumer_process.py")
    proc = subprocess.Popen(
        [sys.executable, script, str(out), group, topic, env.mode, env.address, "0.01"]
    )
    survivor = None
    collector = None
    try:
        wait_until(lambda: out.exists() and "ASSIGNED" in out.read_text(), 30, "the child to join", 0.05)
        survivor = env.connector(group)
        collector = Collector(survivor.create_message_streams({topic: 1})[topic])
        wait_until(lambda: 0 < len(survivor.assignment()) < 4, 30, "the partitions to be shared", 0.05)
        child_lines = lambda: {
            line.encode() for line in out.read_text().split() if line.startswith("v")
        }
        wait_until(lambda: len(child_lines()) >= 60, 30, "the child to consume", 0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        wait_until(lambda: len(survivor.assignment()) == 4, 30, "the survivor to take every partition", 0.05)
        wait_until(lambda: collector.values() | child_lines() >= set(values), 30, "every record consumed", 0.05)
        assert collector.values() | child_lines() == set(values)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if collector is not None:
            collector.stop()
        if survivor is not None:
            survivor.shutdown()


def test_whitelist_sees_new_matching_topics(env):
    prefix = f"wl{uuid.uuid4().hex[:6]}"
    produce(env.bootstrap, f"{prefix}-one", [b"one-%d" % i for i in range(10)])
    connector = env.connector(f"g-{prefix}")
    streams = connector.create_message_streams_by_filter(Whitelist(f"{prefix}-.*"), 2)
    collector = Collector(streams)
    try:
        wait_until(lambda: {b"one-%d" % i for i in range(10)} <= collector.values(), 30, "the first topic", 0.05)
        produce(env.bootstrap, f"{prefix}-two", [b"two-%d" % i for i in range(10)])
        produce(env.bootstrap, f"other{prefix}", [b"other-%d" % i for i in range(10)])
        wait_until(lambda: {b"two-%d" % i for i in range(10)} <= collector.values(), 30, "the new topic", 0.05)
        time.sleep(0.5)  # a window for a wrongly subscribed topic to show up
        assert not any(v.startswith(b"other") for v in collector.values())
        assert {t for t, *_ in collector.items} == {f"{prefix}-one", f"{prefix}-two"}
    finally:
        collector.stop()
        connector.shutdown()


@pytest.fixture(params=["broker", "zookeeper"])
def own_broker_env(request, pykfk_broker_factory) -> GroupEnv:
    """A broker of its own: a blacklist matches every topic of a shared one."""
    return make_env(
        request,
        pykfk_broker_factory(**{k.replace(".", "_"): v for k, v in BROKER_OVERRIDES.items()}),
    )


def test_blacklist_sees_new_topics_except_excluded(own_broker_env):
    env = own_broker_env
    produce(env.bootstrap, "keep-1", [b"k1-%d" % i for i in range(5)])
    produce(env.bootstrap, "skip-1", [b"s1-%d" % i for i in range(5)])
    connector = env.connector("g-black")
    collector = Collector(connector.create_message_streams_by_filter(Blacklist("skip-.*"), 1))
    try:
        wait_until(lambda: {b"k1-%d" % i for i in range(5)} <= collector.values(), 30, "keep-1", 0.05)
        produce(env.bootstrap, "keep-2", [b"k2-%d" % i for i in range(5)])
        produce(env.bootstrap, "skip-2", [b"s2-%d" % i for i in range(5)])
        wait_until(lambda: {b"k2-%d" % i for i in range(5)} <= collector.values(), 30, "keep-2", 0.05)
        time.sleep(0.5)  # a window for a blacklisted topic to show up
        topics = {t for t, *_ in collector.items}
        assert topics == {"keep-1", "keep-2"}  # no skip-*, no internal __consumer_offsets
    finally:
        collector.stop()
        connector.shutdown()


@pytest.mark.parametrize("env", ["broker", "zookeeper"], indirect=True)
def test_committed_offsets_resume(env, topic):
    produce(env.bootstrap, topic, [b"old-%d" % i for i in range(40)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = env.connector(group, auto_commit_enable=False)
    (stream,) = first.create_message_streams({topic: 1})[topic]
    got = []
    wait_until(lambda: got.extend(m.value for m in stream) or len(got) >= 40, 30, "the first 40", 0.05)
    first.commit_offsets()
    if env.mode == "zookeeper":
        from kazoo.client import KazooClient

        from pykfk.client.zk_group import describe

        zk = KazooClient(hosts=env.zk)
        zk.start(10)
        try:
            state = describe(zk, group)
            assert state["offsets"] == {(topic, p): "10" for p in range(4)}  # next offset to read
            assert state["ids"] == [first.consumer_id]
            assert set(state["owners"].values()) == {f"{first.consumer_id}-0"}
            assert set(state["owners"]) == {(topic, p) for p in range(4)}
        finally:
            zk.stop()
            zk.close()
    first.shutdown()
    produce(env.bootstrap, topic, [b"new-%d" % i for i in range(20)])
    second = env.connector(group)
    (stream,) = second.create_message_streams({topic: 1})[topic]
    again: list[bytes] = []
    try:
        wait_until(lambda: again.extend(m.value for m in stream) or len(again) >= 20, 30, "the new records", 0.05)
        time.sleep(0.3)  # a window for an old record to come again
        again.extend(m.value for m in stream)
        assert sorted(again) == sorted(b"new-%d" % i for i in range(20))  # nothing old again
    finally:
        second.shutdown()


def test_shares_a_group_with_kafka_python(broker, topic):
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    produce(broker.bootstrap, topic, [b"x%d" % i for i in range(100)])
    group = f"g-{uuid.uuid4().hex[:8]}"
    ours = GroupEnv("broker", broker.bootstrap, None).connector(group)
    collector = Collector(ours.create_message_streams({topic: 1})[topic])
    theirs = KafkaConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        partition_assignment_strategy=[RangePartitionAssignor],
        heartbeat_interval_ms=200,
        session_timeout_ms=6000,
        consumer_timeout_ms=200,
    )
    seen: set[bytes] = set()
    try:

        def split() -> bool:
            seen.update(m.value for m in theirs)
            return len(ours.assignment()) == 2 and len(theirs.assignment()) == 2

        wait_until(split, 30, "a 2/2 split with kafka-python", 0.05)
        mine = {p for _, p in ours.assignment()}
        assert mine | {tp.partition for tp in theirs.assignment()} == {0, 1, 2, 3}
        wait_until(lambda: (
                seen.update(m.value for m in theirs)
                or (collector.values() | seen) >= {b"x%d" % i for i in range(100)}
            ), 30, "every record between the two", 0.05)
    finally:
        theirs.close()
        collector.stop()
        ours.shutdown()
