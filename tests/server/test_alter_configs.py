"""IncrementalAlterConfigs and AlterConfigs on topics, driven by confluent-kafka's and
kafka-python's admin clients against a broker process: values and sources in
DescribeConfigs, a retention change deleting old segments on the running broker, and
Kafka's errors for bad changes."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient

DYNAMIC_TOPIC_CONFIG = 1


@pytest.fixture
def config_broker(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {"log.retention.check.interval.ms": 200,
                                                    "log.segment.delete.delay.ms": 0}).start()
    yield broker
    broker.stop()


def _describe(admin: AdminClient, topic: str) -> dict:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([resource])[resource].result(20)


def _incremental(admin: AdminClient, topic: str, *entries: ConfigEntry) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([resource])[resource].result(20)


def test_incremental_changes_show_in_describe_configs(config_broker):
    admin = AdminClient({"bootstrap.servers": config_broker.bootstrap})
    admin.create_topics([NewTopic("conf", 1, 1, config={"retention.bytes": "1000000"})])["conf"].result(20)
    _incremental(admin, "conf",
                 ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
                 ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND))
    configs = _describe(admin, "conf")
    assert configs["retention.ms"].value == "3600000" and configs["retention.ms"].source == DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].value == "delete,compact"
    assert configs["retention.bytes"].value == "1000000"  # untouched
    _incremental(admin, "conf", ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE),
                 ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT))
    configs = _describe(admin, "conf")
    assert configs["retention.ms"].source != DYNAMIC_TOPIC_CONFIG
    assert configs["cleanup.policy"].value == "compact"


def test_kafka_python_alter_configs_replaces_the_overrides(config_broker):
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    admin = AdminClient({"bootstrap.servers": config_broker.bootstrap})
    admin.create_topics([NewTopic("kp-conf", 1, 1, config={"retention.bytes": "1000000"})])["kp-conf"].result(20)
    client = KafkaAdminClient(bootstrap_servers=config_broker.bootstrap)
    try:
        client.alter_configs([KPResource(ConfigResourceType.TOPIC, "kp-conf", configs={"segment.ms": "600000"})],
                             incremental=False)
    finally:
        client.close()
    configs = _describe(admin, "kp-conf")
    assert configs["segment.ms"].value == "600000" and configs["segment.ms"].source == DYNAMIC_TOPIC_CONFIG
    # kafka-python sends the other dynamic keys along (AlterConfigs replaces the set).
    assert configs["retention.bytes"].value == "1000000"
    raw = RawClient(config_broker.host, config_broker.port)
    try:
        answer = raw.call(33, 1, {"resources": [{"resource_type": 2, "resource_name": "kp-conf", "configs": [
            {"name": "segment.ms", "value": "700000"}]}], "validate_only": False})
        assert answer.responses[0].error_code == ErrorCode.NONE
    finally:
        raw.close()
    configs = _describe(admin, "kp-conf")
    assert configs["segment.ms"].value == "700000"
    assert configs["retention.bytes"].source != DYNAMIC_TOPIC_CONFIG  # replaced, not merged


def test_a_retention_change_deletes_old_segments_on_the_running_broker(config_broker):
    admin = AdminClient({"bootstrap.servers": config_broker.bootstrap})
    admin.create_topics([NewTopic("shrink", 1, 1, config={"segment.bytes": "4096"})])["shrink"].result(20)
    producer = Producer({"bootstrap.servers": config_broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for i in range(200):
        producer.produce("shrink", b"x" * 500, timestamp=int(time.time() * 1000) - 3_600_000)
        producer.poll(0)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": config_broker.bootstrap, "group.id": "peek"})

    def log_start() -> int:
        return consumer.get_watermark_offsets(TopicPartition("shrink", 0), timeout=10)[0]

    assert log_start() == 0
    _incremental(admin, "shrink", ConfigEntry("retention.ms", "60000", incremental_operation=AlterConfigOpType.SET))
    deadline = time.monotonic() + 20
    while log_start() == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert log_start() > 0  # records an hour old went with their segments
    finally:
        consumer.close()


def test_bad_changes_get_kafkas_errors_and_change_nothing(config_broker):
    admin = AdminClient({"bootstrap.servers": config_broker.bootstrap})
    admin.create_topics([NewTopic("strict", 1, 1)])["strict"].result(20)
    raw = RawClient(config_broker.host, config_broker.port)

    def alter(resources: list[dict]) -> list[int]:
        answer = raw.call(44, 0, {"resources": resources, "validate_only": False})
        return [r.error_code for r in answer.responses]

    try:
        topic = {"resource_type": 2, "resource_name": "strict"}
        assert alter([{**topic, "configs": [{"name": "no.such", "config_operation": 0, "value": "1"}]}]) == [
            ErrorCode.INVALID_CONFIG]
        assert alter([{**topic, "configs": [{"name": "retention.ms", "config_operation": 0, "value": "soon"}]}]) == [
            ErrorCode.INVALID_CONFIG]
        assert alter([{**topic, "configs": [{"name": "retention.ms", "config_operation": 2, "value": "1"}]}]) == [
            ErrorCode.INVALID_CONFIG]
        assert alter([{**topic, "configs": [{"name": "retention.ms", "config_operation": 0, "value": None}]}]) == [
            ErrorCode.INVALID_REQUEST]
        assert alter([{"resource_type": 2, "resource_name": "missing", "configs": []}]) == [
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        assert alter([{"resource_type": 4, "resource_name": "7", "configs": []}]) == [ErrorCode.INVALID_REQUEST]
        assert alter([{**topic, "configs": []}, {**topic, "configs": []}]) == [ErrorCode.INVALID_REQUEST] * 2
    finally:
        raw.close()
    assert all(entry.source != DYNAMIC_TOPIC_CONFIG for entry in _describe(admin, "strict").values())
    with pytest.raises(KafkaException):
        _incremental(admin, "strict", ConfigEntry("max.message.bytes", "-5",
                                                  incremental_operation=AlterConfigOpType.SET))
