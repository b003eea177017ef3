"""Dynamic broker settings (KIP-226) on a standalone broker: IncrementalAlterConfigs and
AlterConfigs on BROKER resources from confluent-kafka's and kafka-python's admin
clients, applied without a restart (a retention change deletes old segments of topics
without their own override), reported by DescribeConfigs with Kafka's sources and
synonyms, kept across a restart, and refused with INVALID_REQUEST when unknown,
invalid or static."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient

DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 2, 3, 4, 5
BROKER = ConfigResource.Type.BROKER


def _describe(admin: AdminClient, name: str) -> dict:
    resource = ConfigResource(BROKER, name)
    return admin.describe_configs([resource])[resource].result(20)


def _set(admin: AdminClient, name: str, key: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(BROKER, name, incremental_configs=[ConfigEntry(key, value, incremental_operation=op)])
    admin.incremental_alter_configs([resource])[resource].result(20)


def _start(data_dir: str) -> BrokerProcess:
    return BrokerProcess(data_dir, {"log.retention.check.interval.ms": 200, "log.segment.delete.delay.ms": 0,
                                    "log.roll.hours": 100}).start()


def test_a_dynamic_retention_deletes_old_segments_and_survives_a_restart(tmp_path):
    broker = _start(str(tmp_path / "data"))
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("aged", 1, 1, config={"segment.bytes": "4096"}),
                             NewTopic("kept", 1, 1, config={"segment.bytes": "4096", "retention.ms": "-1"})]
                            )["kept"].result(20)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "batch.num.messages": 1})
        for topic in ("aged", "kept"):
            for _ in range(100):
                producer.produce(topic, b"x" * 500, timestamp=int(time.time() * 1000) - 3_600_000)
                producer.poll(0)
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "peek"})

        def log_start(topic: str) -> int:
            return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]

        try:
            _set(admin, "0", "log.retention.ms", "60000")
            deadline = time.monotonic() + 20
            while log_start("aged") == 0 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert log_start("aged") > 0  # hour-old records went with their segments
            assert log_start("kept") == 0  # its own override wins over the broker's setting
        finally:
            consumer.close()
        entry = _describe(admin, "0")["log.retention.ms"]
        assert (entry.value, entry.source, entry.is_read_only) == ("60000", DYNAMIC_BROKER_CONFIG, False)
    finally:
        broker.stop()

    broker = _start(str(tmp_path / "data"))
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        configs = _describe(admin, "0")
        assert configs["log.retention.ms"].value == "60000"
        assert configs["log.retention.ms"].source == DYNAMIC_BROKER_CONFIG
        _set(admin, "0", "log.retention.ms", None)
        assert _describe(admin, "0")["log.retention.ms"].source == DEFAULT_CONFIG
    finally:
        broker.stop()


def test_the_cluster_default_is_its_own_resource_below_the_brokers_own(tmp_path):
    # confluent-kafka refuses an empty resource name: the default goes over the raw protocol.
    broker = _start(str(tmp_path / "data"))
    raw = RawClient(broker.host, broker.port)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        answer = raw.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.segment.bytes", "config_operation": 0, "value": "2097152"}]}], "validate_only": False})
        assert answer.responses[0].error_code == ErrorCode.NONE
        default = raw.call(32, 1, {"resources": [{"resource_type": 4, "resource_name": "",
                                                  "configuration_keys": None}], "include_synonyms": False})
        assert [(c.name, c.value, c.config_source) for c in default.results[0].configs] == [
            ("log.segment.bytes", "2097152", DYNAMIC_DEFAULT_BROKER_CONFIG)]
        entry = _describe(admin, "0")["log.segment.bytes"]
        assert (entry.value, entry.source) == ("2097152", DYNAMIC_DEFAULT_BROKER_CONFIG)
        _set(admin, "0", "log.segment.bytes", "3145728")
        entry = _describe(admin, "0")["log.segment.bytes"]
        assert (entry.value, entry.source) == ("3145728", DYNAMIC_BROKER_CONFIG)
        # (confluent-kafka keys synonyms by name, so the layers of one name are read raw)
        described = raw.call(32, 1, {"resources": [{"resource_type": 4, "resource_name": "0",
                                                    "configuration_keys": ["log.segment.bytes"]}],
                                     "include_synonyms": True})
        assert [(s.value, s.source) for s in described.results[0].configs[0].synonyms] == [
            ("3145728", DYNAMIC_BROKER_CONFIG), ("2097152", DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("1073741824", DEFAULT_CONFIG)]
        # A new topic takes the broker's setting as its default, with the broker synonym's source.
        admin.create_topics([NewTopic("fresh", 1, 1)])["fresh"].result(20)
        topic = ConfigResource(ConfigResource.Type.TOPIC, "fresh")
        segment = admin.describe_configs([topic])[topic].result(20)["segment.bytes"]
        assert (segment.value, segment.source) == ("3145728", DYNAMIC_BROKER_CONFIG)
        # The static setting shows where nothing dynamic covers it.
        assert _describe(admin, "0")["log.roll.hours"].source == STATIC_BROKER_CONFIG
    finally:
        raw.close()
        broker.stop()


def test_kafka_python_alter_configs_replaces_the_brokers_dynamic_set(tmp_path):
    from kafka.admin import ConfigResource as KPResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    broker = _start(str(tmp_path / "data"))
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        _set(admin, "0", "log.retention.bytes", "1000000")
        client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            client.alter_configs([KPResource(ConfigResourceType.BROKER, "0", configs={"min.insync.replicas": "1",
                                                                                       "message.max.bytes": "2000000"})],
                                 incremental=False)
        finally:
            client.close()
        configs = _describe(admin, "0")
        assert configs["message.max.bytes"].value == "2000000"
        assert configs["message.max.bytes"].source == DYNAMIC_BROKER_CONFIG
        # kafka-python sends the other dynamic settings along (AlterConfigs replaces the set).
        assert configs["log.retention.bytes"].value == "1000000"
        raw = RawClient(broker.host, broker.port)
        try:
            answer = raw.call(33, 1, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
                {"name": "message.max.bytes", "value": "3000000"}]}], "validate_only": False})
            assert answer.responses[0].error_code == ErrorCode.NONE
        finally:
            raw.close()
        configs = _describe(admin, "0")
        assert configs["message.max.bytes"].value == "3000000"
        assert configs["log.retention.bytes"].source == DEFAULT_CONFIG  # replaced, not merged
    finally:
        broker.stop()


def test_unknown_static_and_invalid_settings_get_invalid_request_and_change_nothing(tmp_path):
    broker = _start(str(tmp_path / "data"))
    raw = RawClient(broker.host, broker.port)
    try:
        def alter(name: str, key: str, value: str | None, op: int = 0) -> int:
            answer = raw.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": name, "configs": [
                {"name": key, "config_operation": op, "value": value}]}], "validate_only": False})
            return answer.responses[0].error_code

        assert alter("0", "no.such.setting", "1") == ErrorCode.INVALID_REQUEST
        assert alter("0", "broker.id", "3") == ErrorCode.INVALID_REQUEST  # static: needs a restart
        assert alter("0", "listeners", "PLAINTEXT://127.0.0.1:1") == ErrorCode.INVALID_REQUEST
        assert alter("0", "log.retention.ms", "soon") == ErrorCode.INVALID_REQUEST
        assert alter("0", "log.segment.bytes", "1") == ErrorCode.INVALID_REQUEST  # below Kafka's minimum
        assert alter("0", "log.retention.ms", None, op=1) == ErrorCode.NONE  # deleting nothing is fine
        assert alter("0", "log.retention.ms", None) == ErrorCode.INVALID_REQUEST  # SET without a value
        assert alter("5", "log.retention.ms", "1000") == ErrorCode.INVALID_REQUEST  # another broker's id
        validate_only = raw.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": "0", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "1234"}]}], "validate_only": True})
        assert validate_only.responses[0].error_code == ErrorCode.NONE
        described = raw.call(32, 1, {"resources": [{"resource_type": 4, "resource_name": "0",
                                                    "configuration_keys": None}], "include_synonyms": False})
        sources = {c.name: c.config_source for c in described.results[0].configs}
        assert DYNAMIC_BROKER_CONFIG not in sources.values()  # nothing was stored
        assert broker.proc.poll() is None
    finally:
        raw.close()
        broker.stop()
