"""ApiVersions v3+ features (KIP-584): what a Kafka 4.1 broker sends, limited to what
pykfk serves, read back from raw requests and negotiated by confluent-kafka."""

from __future__ import annotations

import logging

import confluent_kafka
import pytest

from pykfk.testing import InProcessBroker, RawClient

API_VERSIONS = 18
CLIENT = {"client_software_name": "raw", "client_software_version": "1"}


def _features(broker: InProcessBroker, version: int):
    client = RawClient(broker.host, broker.port)
    try:
        response = client.call(API_VERSIONS, version, CLIENT)
    finally:
        client.close()
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}
    return supported, finalized, response.finalized_features_epoch


@pytest.fixture
def broker_factory(tmp_path):
    started = []

    def start(**overrides) -> InProcessBroker:
        broker = InProcessBroker(str(tmp_path / f"data{len(started)}"), overrides)
        started.append(broker)
        broker.start()
        return broker

    yield start
    for broker in started:
        broker.stop()


def test_features_as_kafka_sends_them_and_share_version_only_with_share_groups(broker_factory):
    broker = broker_factory()
    supported, finalized, epoch = _features(broker, 4)
    # Transactions v2 (level 2) only with a Produce that adds partitions (v12+).
    produce = broker.broker.registry.get(0)
    level = 2 if produce is not None and produce.max_version >= 12 else 1
    assert supported == {"metadata.version": (7, 27), "transaction.version": (0, level),
                         "group.version": (0, 1), "share.version": (0, 1)}
    assert finalized == {"metadata.version": (27, 27), "transaction.version": (level, level),
                         "group.version": (1, 1), "share.version": (1, 1)}
    assert epoch >= 0
    # v3 clients cannot read a minimum of 0: Kafka sends them 1.
    supported_v3, finalized_v3, _ = _features(broker, 3)
    assert supported_v3["transaction.version"] == (1, level) and supported_v3["metadata.version"] == (7, 27)
    assert finalized_v3 == finalized
    # Before v3 the fields do not exist.
    client = RawClient(broker.host, broker.port)
    try:
        assert list(client.call(API_VERSIONS, 2, {}).supported_features) == []
    finally:
        client.close()

    without_share = broker_factory(group_share_enable="false")
    supported, finalized, _ = _features(without_share, 4)
    assert "share.version" not in supported and "share.version" not in finalized
    assert finalized["group.version"] == (1, 1)


def test_confluent_kafka_negotiates_with_the_features_in_the_response(broker_factory):
    broker = broker_factory()
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("test_features.librdkafka")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Collect())
    producer = confluent_kafka.Producer({"bootstrap.servers": f"{broker.host}:{broker.port}",
                                         "debug": "protocol,feature", "logger": logger})
    producer.produce("features", b"v")
    assert producer.flush(15) == 0
    received = [line for line in lines if "Received ApiVersionResponse (v3" in line]
    assert received, "librdkafka did not read the v3 response"
    assert not [line for line in lines if "ApiVersionRequest failed" in line]
    assert any("Enabling feature IdempotentProducer" in line for line in lines)
