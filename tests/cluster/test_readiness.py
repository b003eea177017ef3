"""A broker answers no request before it can name itself and a controller: the first
Metadata any client gets, however early it connects, is complete (an admin client that
sees controller -1 gives up with "waiting for controller")."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pykfk.testing import BrokerProcess, RawClient, free_port

from .conftest import CLUSTER_DEFAULTS

METADATA = 3


def _first_metadata(broker: BrokerProcess, timeout: float = 60.0) -> Any:
    """Start ``broker`` and send Metadata v1 on the first connection the port accepts."""
    starter = threading.Thread(target=broker.start, kwargs={"timeout": timeout}, daemon=True)
    starter.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                client = RawClient(broker.host, broker.port, timeout=timeout)
            except OSError:
                time.sleep(0.002)  # not listening yet: knock again at once
                continue
            try:
                return client.call(METADATA, 1, {"topics": None})
            finally:
                client.close()
        raise AssertionError(f"the broker never accepted a connection:\n{broker.log_tail()}")
    finally:
        starter.join(timeout)


@pytest.mark.parametrize("broker_id", [0, 7])
def test_first_metadata_of_a_cluster_broker_names_it_and_a_controller(tmp_path, zookeeper_server, broker_id):
    connect = zookeeper_server.connect_string(f"ready-{broker_id}-{time.monotonic_ns()}")
    broker = BrokerProcess(str(tmp_path / "broker"), {**CLUSTER_DEFAULTS, "zookeeper.connect": connect,
                                                      "broker.id": broker_id}, port=free_port())
    try:
        metadata = _first_metadata(broker)
        assert [b.node_id for b in metadata.brokers] == [broker_id]
        assert metadata.controller_id == broker_id
    finally:
        broker.stop()


def test_first_metadata_of_a_standalone_broker_names_it_as_controller(tmp_path):
    broker = BrokerProcess(str(tmp_path / "broker"), {"broker.id": 3}, port=free_port())
    try:
        metadata = _first_metadata(broker)
        assert [(b.node_id, b.host, b.port) for b in metadata.brokers] == [(3, "127.0.0.1", broker.port)]
        assert metadata.controller_id == 3
    finally:
        broker.stop()
