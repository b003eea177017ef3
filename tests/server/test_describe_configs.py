"""DescribeConfigs answered to a real admin client (confluent-kafka): values, sources,
read-only flags and synonyms come from the one declaration of settings."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic

from pykfk.testing import RawClient

TIMEOUT_S = 30
DESCRIBE_CONFIGS = 32


@pytest.fixture
def admin(pykfk_broker_factory):
    broker = pykfk_broker_factory(**{"log.retention.hours": 24, "log.segment.bytes": 1_048_576})
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = client.create_topics([NewTopic("described", 1, 1, config={"retention.bytes": "5000"})])
    futures["described"].result(TIMEOUT_S)
    return client, broker


def _describe(client: AdminClient, kind: ConfigResource.Type, name: str) -> dict:
    (future,) = client.describe_configs([ConfigResource(kind, name)], request_timeout=TIMEOUT_S).values()
    return future.result(TIMEOUT_S)


def test_topic_settings_report_override_broker_and_default_sources(admin):
    client, _broker = admin
    configs = _describe(client, ConfigResource.Type.TOPIC, "described")
    retention_bytes = configs["retention.bytes"]
    assert (retention_bytes.value, retention_bytes.source) == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    retention_ms = configs["retention.ms"]  # from log.retention.hours=24 in the broker's settings
    assert (retention_ms.value, retention_ms.source) == (str(24 * 3_600_000), ConfigSource.STATIC_BROKER_CONFIG.value)
    assert set(retention_ms.synonyms) == {"log.retention.hours"}  # (a dict by name here)
    segment_ms = configs["segment.ms"]
    assert (segment_ms.value, segment_ms.source, segment_ms.is_default) == (
        str(7 * 24 * 3_600_000), ConfigSource.DEFAULT_CONFIG.value, True)
    assert not any(entry.is_read_only for entry in configs.values())
    assert set(configs) >= {"cleanup.policy", "min.insync.replicas", "max.message.bytes"}


def test_broker_settings_are_read_only_unless_kafka_changes_them_at_run_time(admin):
    client, _broker = admin
    configs = _describe(client, ConfigResource.Type.BROKER, "0")
    assert (configs["log.segment.bytes"].value, configs["log.segment.bytes"].source) == (
        "1048576", ConfigSource.STATIC_BROKER_CONFIG.value)
    assert not configs["log.segment.bytes"].is_read_only  # dynamic in Kafka
    assert configs["broker.id"].is_read_only
    assert configs["zookeeper.connect"].value is None
    assert configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_synonyms_come_in_kafkas_order_with_every_source(admin, version):
    _client, broker = admin
    raw = RawClient(broker.host, broker.port)
    try:
        body = {"resources": [{"resource_type": 2, "resource_name": "described",
                               "configuration_keys": ["retention.ms", "retention.bytes"]}],
                "include_synonyms": True, "include_documentation": True}
        (result,) = raw.call(DESCRIBE_CONFIGS, version, body).results
    finally:
        raw.close()
    synonyms = {c.name: [(s.name, s.value, s.source) for s in c.synonyms] for c in result.configs}
    assert synonyms == {
        "retention.ms": [("log.retention.hours", "24", 4), ("log.retention.hours", "168", 5)],
        "retention.bytes": [("retention.bytes", "5000", 1), ("log.retention.bytes", "-1", 5)],
    }
    if version >= 3:
        assert {c.name: (c.config_type, bool(c.documentation)) for c in result.configs} == {
            "retention.ms": (5, True), "retention.bytes": (5, True)}
