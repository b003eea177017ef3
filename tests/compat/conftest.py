"""Compatibility tests: unmodified Kafka clients against a pykfk-broker process."""

from __future__ import annotations

import itertools

import pytest

from pykfk.testing import BrokerProcess

_topic_numbers = itertools.count()


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker process for a module's cases that do not restart it."""
    broker = BrokerProcess(str(tmp_path_factory.mktemp("compat") / "data"))
    broker.start()
    yield broker
    assert broker.stop() == 0, broker.log_tail()


@pytest.fixture
def topic_name(request):
    """A fresh topic name per test (tests share a broker)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return f"{base}-{next(_topic_numbers)}"


def expected_records(count: int, partitions: int, *, value_size: int = 40):
    """Deterministic keyed records: (partition, key, value, headers, timestamp_ms)."""
    out = []
    for i in range(count):
        key = f"key-{i % 997:04d}".encode()
        value = (f"value-{i:07d}-".encode() * (value_size // 14 + 1))[:value_size]
        headers = [("seq", str(i).encode()), ("empty", b"")] if i % 3 else []
        out.append((i % partitions, key, value, headers, 1_700_000_000_000 + i))
    return out
