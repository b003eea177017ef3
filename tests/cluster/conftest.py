"""Fixtures for cluster tests: a real ZooKeeper (``zookeeper_server`` from pykfk.testing)
and broker processes joined into one cluster under a fresh chroot per cluster."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.exceptions import NoNodeError

from pykfk.testing import BrokerProcess, wait_until

# Short sessions and lag so failures are noticed within seconds (ZooKeeper tickTime is
# 200 ms in the fixture, so 3 s is 15 ticks), bounded everywhere.
CLUSTER_DEFAULTS = {
    "zookeeper.session.timeout.ms": 3000,
    "zookeeper.connection.timeout.ms": 10000,
    "replica.lag.time.max.ms": 4000,
    "replica.fetch.backoff.ms": 200,
    "replica.socket.timeout.ms": 5000,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
    "leader.imbalance.check.interval.seconds": 3600,
    "controlled.shutdown.retry.backoff.ms": 200,
    "controlled.shutdown.max.retries": 2,
    "group.initial.rebalance.delay.ms": 0,
}


class Cluster:
    """Broker processes sharing one ZooKeeper chroot, and a kazoo view of its znodes."""

    def __init__(self, base_dir: str, zookeeper: Any, size: int, overrides: dict[str, Any], first_id: int = 0):
        from kazoo.client import KazooClient

        self.chroot = f"c-{uuid.uuid4().hex[:10]}"
        self.connect = zookeeper.connect_string(self.chroot)
        self.zookeeper = zookeeper
        settings = {**CLUSTER_DEFAULTS, **overrides, "zookeeper.connect": self.connect}
        self.brokers: dict[int, BrokerProcess] = {
            i: BrokerProcess(os.path.join(base_dir, f"broker{i}"), {**settings, "broker.id": i})
            for i in range(first_id, first_id + size)
        }
        self.zk = KazooClient(hosts=zookeeper.connect_string())
        self.zk.start(timeout=10)

    def start(self) -> Cluster:
        for broker in self.brokers.values():
            broker.start(timeout=60)
        wait_until(lambda: len(self.registered()) == len(self.brokers), 30, "all brokers registered")
        wait_until(lambda: self.controller() >= 0, 30, "a controller")
        return self

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.stop(timeout=20)
        self.zk.stop()
        self.zk.close()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.is_running())

    def path(self, znode: str) -> str:
        return f"/{self.chroot}{znode}"

    # -- ZooKeeper view --------------------------------------------------------------

    def registered(self) -> set[int]:
        try:
            return {int(c) for c in self.zk.get_children(self.path("/brokers/ids"))}
        except NoNodeError:
            return set()

    def controller(self) -> int:
        try:
            data, _ = self.zk.get(self.path("/controller"))
            return int(json.loads(data)["brokerid"])
        except NoNodeError:
            return -1

    def controller_epoch(self) -> int:
        data, _ = self.zk.get(self.path("/controller_epoch"))
        return int(data)

    def state(self, topic: str, partition: int) -> dict | None:
        try:
            data, _ = self.zk.get(self.path(f"/brokers/topics/{topic}/partitions/{partition}/state"))
        except NoNodeError:
            return None
        return json.loads(data)

    def assignment(self, topic: str) -> dict[int, list[int]]:
        data, _ = self.zk.get(self.path(f"/brokers/topics/{topic}"))
        return {int(p): r for p, r in json.loads(data)["partitions"].items()}

    def leader(self, topic: str, partition: int) -> int:
        state = self.state(topic, partition)
        return -1 if state is None else state["leader"]

    def isr(self, topic: str, partition: int) -> list[int]:
        state = self.state(topic, partition)
        return [] if state is None else sorted(state["isr"])

    def wait_for_full_isr(self, topic: str, partitions: int, timeout: float = 60) -> None:
        def full() -> bool:
            assignment = self.assignment(topic)
            return all(
                self.isr(topic, p) == sorted(assignment[p]) and self.leader(topic, p) >= 0 for p in range(partitions)
            )

        wait_until(full, timeout, f"every partition of {topic} fully in sync")

    # -- admin through a Kafka client --------------------------------------------------

    def create_topic(self, name: str, partitions: int, replication: int, **configs: Any) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication, config={k: str(v) for k, v in configs.items()})],
            request_timeout=20,
        )
        futures[name].result(30)
        wait_until(lambda: all(self.leader(name, p) >= 0 for p in range(partitions)), 30, f"leaders of {name}")


@pytest.fixture
def cluster_factory(tmp_path: Any, zookeeper_server: Any) -> Iterator[Callable[..., Cluster]]:
    """``factory(size=3, *, first_id=0, **overrides) -> Cluster`` (started; broker ids
    from ``first_id``); all stopped at teardown."""
    made: list[Cluster] = []

    def factory(size: int = 3, *, first_id: int = 0, **overrides: Any) -> Cluster:
        directory = tmp_path / f"cluster{len(made)}"
        cluster = Cluster(str(directory), zookeeper_server, size, {k.replace("_", "."): v for k, v in overrides.items()},
                          first_id)
        made.append(cluster)
        return cluster.start()

    try:
        yield factory
    finally:
        for cluster in made:
            cluster.close()
