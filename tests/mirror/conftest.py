"""Fixtures of the mirror tests: standalone brokers and one 3-broker ZooKeeper cluster
(tests/cluster/conftest.py's Cluster) shared by the module that asks for it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pykfk.testing import BrokerProcess
from tests.cluster.conftest import Cluster

# Groups form at once instead of after Kafka's 3 s wait for more members.
BROKER_SETTINGS = {"group.initial.rebalance.delay.ms": 0}


@pytest.fixture
def standalone_factory(tmp_path: Any) -> Iterator[Callable[[str], BrokerProcess]]:
    made: list[BrokerProcess] = []

    def factory(name: str) -> BrokerProcess:
        broker = BrokerProcess(str(tmp_path / name), BROKER_SETTINGS, log_level="WARNING").start()
        made.append(broker)
        return broker

    try:
        yield factory
    finally:
        for broker in made:
            broker.stop()


@pytest.fixture(scope="module")
def zk_cluster(tmp_path_factory: Any, zookeeper_server: Any) -> Iterator[Cluster]:
    cluster = Cluster(str(tmp_path_factory.mktemp("cluster")), zookeeper_server, 3, dict(BROKER_SETTINGS))
    try:
        yield cluster.start()
    finally:
        cluster.close()
