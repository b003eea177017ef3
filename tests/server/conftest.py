"""Fixtures for server tests: a raw Kafka-protocol client over a plain socket."""

from __future__ import annotations

import pytest

from pykfk.testing import RawClient

__all__ = ["RawClient"]


@pytest.fixture
def broker(pykfk_broker_inprocess):
    return pykfk_broker_inprocess


@pytest.fixture
def raw(broker):
    clients = []

    def connect() -> RawClient:
        client = RawClient(broker.host, broker.port)
        clients.append(client)
        return client

    client = connect()
    client.connect = connect
    yield client
    for c in clients:
        c.close()
