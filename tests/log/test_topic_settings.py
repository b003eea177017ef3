"""Kafka 4.1's topic settings against a broker process, set through CreateTopics and
IncrementalAlterConfigs and observed working: compression.type recompresses batches of
another codec, max.compaction.lag.ms gets records compacted in time, the KIP-937
timestamp window refuses records with INVALID_TIMESTAMP, tiered storage is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from kafka import KafkaConsumer, KafkaProducer

from pykfk.testing import BrokerProcess

# Every new setting with a value other than its default, as a user would set them.
NEW_SETTINGS = {
    "compression.type": "lz4", "compression.gzip.level": "5", "compression.lz4.level": "12",
    "compression.zstd.level": "7", "max.compaction.lag.ms": "600000", "segment.jitter.ms": "1000",
    "message.timestamp.before.max.ms": "86400000", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.difference.max.ms": "86400000", "leader.replication.throttled.replicas": "0:0",
    "follower.replication.throttled.replicas": "*", "message.format.version": "3.0-IV1",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    broker = BrokerProcess(str(tmp_path_factory.mktemp("topic-settings") / "data"),
                           {"log.cleaner.backoff.ms": 200, "auto.create.topics.enable": "false",
                            "group.initial.rebalance.delay.ms": 0}).start()
    yield broker
    broker.stop()


def _create(admin: AdminClient, name: str, **configs: str) -> None:
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(20)


def _described(admin: AdminClient, name: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    return {k: v.value for k, v in admin.describe_configs([resource])[resource].result(20).items()}


def _stored_codecs(broker: BrokerProcess, topic: str) -> list[str]:
    """The codec of every batch in the partition's segments, as ``pykfk log dump`` reads them."""
    dump = subprocess.run([sys.executable, "-m", "pykfk.cli.main", "log", "dump", "-o", "json",
                           os.path.join(broker.log_dir, f"{topic}-0")],
                          capture_output=True, text=True, timeout=60, check=True)
    return [batch["compression"] for file in json.loads(dump.stdout)["files"] for batch in file.get("batches", [])]


def test_every_setting_is_taken_by_create_topics_and_incremental_alter_configs(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, "all-settings", **NEW_SETTINGS)
    described = _described(admin, "all-settings")
    assert {k: described[k] for k in NEW_SETTINGS} == NEW_SETTINGS
    _create(admin, "altered")
    resource = ConfigResource(ConfigResource.Type.TOPIC, "altered", incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in NEW_SETTINGS.items()])
    admin.incremental_alter_configs([resource])[resource].result(20)
    described = _described(admin, "altered")
    assert {k: described[k] for k in NEW_SETTINGS} == NEW_SETTINGS
    assert described["remote.storage.enable"] == "false"

    for name, value in (("remote.storage.enable", "true"), ("local.retention.ms", "3600000"),
                        ("local.retention.bytes", "1048576")):
        with pytest.raises(Exception) as refused:
            _create(admin, f"tiered-{name.replace('.', '-')}", **{name: value})
        assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG
        assert "tiered storage (KIP-405) is not supported" in refused.value.args[0].str()


def test_a_zstd_topic_stores_gzip_batches_as_zstd(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, "zstd-topic", **{"compression.type": "zstd", "compression.zstd.level": "10"})
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip", linger_ms=20)
    for i in range(200):
        producer.send("zstd-topic", key=f"k{i}".encode(), value=f"value {i} ".encode() * 20,
                      headers=[("h", str(i).encode())], timestamp_ms=1_700_000_000_000 + i)
    producer.flush(20)
    producer.close()
    rdkafka = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip", "linger.ms": 20,
                        "enable.idempotence": True})
    for i in range(200, 300):
        rdkafka.produce("zstd-topic", key=f"k{i}".encode(), value=f"value {i} ".encode() * 20)
    assert rdkafka.flush(20) == 0

    codecs = _stored_codecs(broker, "zstd-topic")
    assert len(codecs) >= 2 and set(codecs) == {"zstd"}, codecs

    consumer = KafkaConsumer("zstd-topic", bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=1500, enable_auto_commit=False)
    read = list(consumer)
    consumer.close()
    assert [r.offset for r in read] == list(range(300))
    assert read[7].key == b"k7" and read[7].value == b"value 7 " * 20
    assert read[7].headers == [("h", b"7")] and read[7].timestamp == 1_700_000_000_007
    confluent = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "zstd-readers",
                          "auto.offset.reset": "earliest"})
    confluent.subscribe(["zstd-topic"])
    values: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 20
    while len(values) < 300 and time.monotonic() < deadline:
        for msg in confluent.consume(300, 1.0):
            if not msg.error():
                values[msg.key()] = msg.value()
    confluent.close()
    assert len(values) == 300 and values[b"k250"] == b"value 250 " * 20

    # compression.type=producer (the default) keeps what the producer sent.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "zstd-topic", incremental_configs=[
        ConfigEntry("compression.type", "producer", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(20)
    rdkafka.produce("zstd-topic", key=b"late", value=b"gzip stays gzip " * 10)
    assert rdkafka.flush(20) == 0
    assert _stored_codecs(broker, "zstd-topic")[-1] == "gzip"


def test_records_outside_the_timestamp_window_are_refused(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, "recent-only", **{"message.timestamp.before.max.ms": "3600000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, "retries": 0})
    outcomes: dict[str, object] = {}
    now = int(time.time() * 1000)
    for label, stamp in (("old", now - 2 * 3600_000), ("fresh", now), ("future", now + 24 * 3600_000)):
        producer.produce("recent-only", value=label.encode(), timestamp=stamp,
                         on_delivery=lambda err, _msg, label=label: outcomes.__setitem__(label, err))
        producer.flush(10)
    assert outcomes["old"] is not None and outcomes["old"].code() == KafkaError.INVALID_TIMESTAMP
    assert outcomes["fresh"] is None and outcomes["future"] is None
    # The deprecated difference setting bounds the future too.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "recent-only", incremental_configs=[
        ConfigEntry("message.timestamp.difference.max.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(20)
    producer.produce("recent-only", value=b"future", timestamp=now + 24 * 3600_000,
                     on_delivery=lambda err, _msg: outcomes.__setitem__("future", err))
    producer.flush(10)
    assert outcomes["future"] is not None and outcomes["future"].code() == KafkaError.INVALID_TIMESTAMP


def test_compaction_runs_within_max_compaction_lag(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    _create(admin, "lagged", **{"cleanup.policy": "compact", "max.compaction.lag.ms": "1500"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for version in range(5):
        for key in range(10):
            producer.produce("lagged", key=f"k{key}".encode(), value=f"v{version}".encode())
        producer.flush(10)
    time.sleep(1.6)
    # The next append finds the active segment older than max.compaction.lag.ms (segment.ms
    # is a week): it rolls, and the cleaner takes the rolled segment on its next pass.
    producer.produce("lagged", key=b"k0", value=b"v5")
    assert producer.flush(10) == 0

    def read_all() -> list[tuple[bytes, bytes]]:
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=1500, enable_auto_commit=False)
        from kafka import TopicPartition

        consumer.assign([TopicPartition("lagged", 0)])
        records = [(r.key, r.value) for r in consumer]
        consumer.close()
        return records

    deadline = time.monotonic() + 15
    records = read_all()
    while len(records) > 11 and time.monotonic() < deadline:
        time.sleep(0.3)
        records = read_all()
    assert len(records) == 11, f"{len(records)} records: not compacted"
    latest = dict(records)
    assert latest == {**{f"k{k}".encode(): b"v4" for k in range(10)}, b"k0": b"v5"}
