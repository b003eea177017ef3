"""Kafka 4's own config/server.properties (KRaft, one node that is broker and controller)
starts a pykfk broker unchanged but for its ports and log dir: node.id is the broker id,
the controller listener is not bound, the quorum settings are logged as having no effect.
Roles pykfk cannot take refuse to start with a message saying why."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pykfk.config import BrokerConfig, ConfigError, parse_properties
from pykfk.testing import free_port
from tests.security.test_kafka_server_properties import FileConfiguredBroker

# The settings of Kafka 4.1's config/server.properties (comments left out).
KRAFT_SERVER_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=localhost:{controller_port}
listeners=PLAINTEXT://:{port},CONTROLLER://:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{port},CONTROLLER://localhost:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={log_dir}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def _props(**changes: str) -> dict[str, str]:
    props = parse_properties(KRAFT_SERVER_PROPERTIES.format(port=9092, controller_port=9093, log_dir="/tmp/kraft"))
    props.update(changes)
    return props


def test_the_kraft_settings_map_onto_one_pykfk_broker():
    config = BrokerConfig(_props())
    assert config.broker_id == 1
    assert [str(listener) for listener in config.listeners] == ["PLAINTEXT://:9092"]
    assert [str(listener) for listener in config.advertised_listeners] == ["PLAINTEXT://localhost:9092"]
    assert {"controller.quorum.bootstrap.servers", "share.coordinator.state.topic.min.isr"} <= set(
        config.ignored_keys_set())
    # Kafka 3.9's file names the quorum with controller.quorum.voters instead.
    voters = _props(**{"controller.quorum.voters": "1@localhost:9093"})
    del voters["controller.quorum.bootstrap.servers"]
    assert BrokerConfig(voters).broker_id == 1


def test_jvm_settings_given_per_listener_are_accepted_and_reported():
    config = BrokerConfig(_props(**{"listener.name.plaintext.ssl.keymanager.algorithm": "SunX509"}))
    assert "listener.name.plaintext.ssl.keymanager.algorithm" in config.ignored_keys_set()


@pytest.mark.parametrize(("changes", "key", "says"), [
    ({"process.roles": "broker"}, "process.roles", "zookeeper.connect"),
    ({"process.roles": "controller"}, "process.roles", "broker,controller"),
    ({"broker.id": "2"}, "node.id", "differs from broker.id 2"),
    ({"zookeeper.connect": "127.0.0.1:2181"}, "process.roles", "cannot also use zookeeper.connect"),
])
def test_roles_pykfk_cannot_take_are_refused(changes, key, says):
    with pytest.raises(ConfigError) as refused:
        BrokerConfig(_props(**changes))
    assert refused.value.key == key and says in refused.value.message


def test_kafkas_kraft_server_properties_starts_a_broker(tmp_path):
    port = free_port()
    properties = tmp_path / "server.properties"
    properties.write_text(KRAFT_SERVER_PROPERTIES.format(port=port, controller_port=free_port(),
                                                         log_dir=tmp_path / "kraft-combined-logs"))
    broker = FileConfiguredBroker(str(tmp_path / "kraft-combined-logs"), properties).start()
    try:
        assert broker.port == port
        assert "controller.quorum.bootstrap.servers is accepted for compatibility and has no effect" in broker.log_text()
        producer = Producer({"bootstrap.servers": f"localhost:{port}"})
        producer.produce("quickstart-events", b"This is my first event")
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": f"localhost:{port}", "group.id": "quickstart"})
        consumer.assign([TopicPartition("quickstart-events", 0, 0)])
        messages = [m for m in consumer.consume(1, 15) if not m.error()]
        consumer.close()
        assert [m.value() for m in messages] == [b"This is my first event"]
    finally:
        broker.stop()
