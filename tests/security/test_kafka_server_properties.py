"""Kafka's own configuration files start pykfk unchanged: a ``server.properties`` put
together from the examples of Kafka's documentation (ZooKeeper, listeners, SSL with JKS
stores made by the JDK's keytool, SASL, the ACL authorizer, log settings) starts a
3-broker ZooKeeper cluster that confluent-kafka clients use over SASL_SSL."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from pykfk.testing import BrokerProcess, free_port, wait_until

STORE_PASSWORD = "test1234"
KEY_PASSWORD = "key-pass"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required \\\n'
        '    username="admin" password="admin-secret" \\\n'
        '    user_admin="admin-secret" user_alice="alice-secret";')

# Kafka's config/server.properties (ZooKeeper mode) and the settings of its security
# chapter, as a user copies them; only the paths, ports and ids are filled in.
SERVER_PROPERTIES = """\
############################# Server Basics #############################
broker.id={broker_id}

############################# Socket Server Settings #############################
listeners=SASL_SSL://127.0.0.1:{port}
advertised.listeners=SASL_SSL://127.0.0.1:{port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
security.inter.broker.protocol=SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# SSL #############################
ssl.keystore.type=JKS
ssl.keystore.location={keystore}
ssl.keystore.password={store_password}
ssl.key.password={key_password}
ssl.truststore.type=JKS
ssl.truststore.location={truststore}
ssl.truststore.password={store_password}
ssl.client.auth=none
ssl.enabled.protocols=TLSv1.2,TLSv1.1,TLSv1
ssl.secure.random.implementation=SHA1PRNG
ssl.keymanager.algorithm=SunX509
ssl.trustmanager.algorithm=PKIX

############################# SASL #############################
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=PLAIN
sasl.server.max.receive.size=524288
listener.name.sasl_ssl.plain.sasl.jaas.config={jaas}

############################# Authorizer #############################
authorizer.class.name=kafka.security.authorizer.AclAuthorizer
super.users=User:admin
allow.everyone.if.no.acl.found=false

############################# Log Basics #############################
log.dirs={log_dir}
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2

############################# Log Retention Policy #############################
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000

############################# Zookeeper #############################
zookeeper.connect={zookeeper}
zookeeper.connection.timeout.ms=18000
zookeeper.set.acl=false

############################# Group Coordinator Settings #############################
group.initial.rebalance.delay.ms=0
"""


class FileConfiguredBroker(BrokerProcess):
    """A broker started from a server.properties file alone, as a user starts one."""

    def __init__(self, log_dir: str, properties: Path):
        super().__init__(log_dir)
        self.properties = properties

    def command(self) -> list[str]:
        return [sys.executable, "-m", "pykfk.broker", "--log-level", self.log_level,
                "--ready-file", self._ready_file, str(self.properties)]


def _keytool(*args: str) -> None:
    subprocess.run(["keytool", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def stores(tmp_path_factory) -> dict[str, Path]:
    """A JKS key store (its key under a password of its own) and a JKS trust store
    holding the certificate, made as Kafka's documentation makes them."""
    directory = tmp_path_factory.mktemp("jks")
    keystore, truststore, cert = directory / "server.keystore.jks", directory / "server.truststore.jks", directory / "cert.pem"
    _keytool("-genkeypair", "-alias", "localhost", "-keyalg", "RSA", "-keysize", "2048", "-validity", "30",
             "-dname", "CN=localhost,O=pykfk tests", "-ext", "SAN=dns:localhost,ip:127.0.0.1",
             "-storetype", "JKS", "-keystore", str(keystore), "-storepass", STORE_PASSWORD,
             "-keypass", KEY_PASSWORD, "-noprompt")
    _keytool("-exportcert", "-rfc", "-alias", "localhost", "-keystore", str(keystore),
             "-storepass", STORE_PASSWORD, "-file", str(cert))
    _keytool("-importcert", "-alias", "CARoot", "-file", str(cert), "-storetype", "JKS",
             "-keystore", str(truststore), "-storepass", STORE_PASSWORD, "-noprompt")
    return {"keystore": keystore, "truststore": truststore, "cert": cert}


def _client(broker: BrokerProcess, stores: dict[str, Path], user: str = "admin", password: str = "admin-secret",
            **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(stores["cert"]), "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password, **extra}


def test_a_documentation_server_properties_starts_a_sasl_ssl_cluster(tmp_path, stores, zookeeper_server):
    chroot = zookeeper_server.connect_string(f"docs-{uuid.uuid4().hex[:10]}")
    brokers = []
    for broker_id in range(3):
        properties = tmp_path / f"server-{broker_id}.properties"
        properties.write_text(SERVER_PROPERTIES.format(
            broker_id=broker_id, port=free_port(), keystore=stores["keystore"], truststore=stores["truststore"],
            store_password=STORE_PASSWORD, key_password=KEY_PASSWORD, jaas=JAAS,
            log_dir=tmp_path / f"data-{broker_id}", zookeeper=chroot))
        brokers.append(FileConfiguredBroker(str(tmp_path / f"data-{broker_id}"), properties))
    try:
        for broker in brokers:
            broker.start(timeout=60)
        log = brokers[0].log_text()
        for jvm_only in ("ssl.secure.random.implementation", "ssl.keymanager.algorithm", "zookeeper.set.acl"):
            assert log.count(f"{jvm_only} is accepted for compatibility and has no effect") == 1, log

        admin = AdminClient(_client(brokers[0], stores))
        admin.create_topics([NewTopic("docs", 3, 3, config={"min.insync.replicas": "2"})])["docs"].result(30)
        producer = Producer(_client(brokers[1], stores, **{"acks": "all", "linger.ms": 5}))
        wait_until(lambda: all(p.leader >= 0 and len(p.isrs) == 3
                               for p in admin.list_topics("docs", timeout=10).topics["docs"].partitions.values()),
                   30, "every replica of docs in sync")
        for i in range(60):
            producer.produce("docs", f"v{i}".encode(), key=f"k{i}".encode())
        assert producer.flush(30) == 0

        consumer = Consumer(_client(brokers[2], stores, **{"group.id": "docs-readers", "auto.offset.reset": "earliest"}))
        consumer.subscribe(["docs"])
        seen: set[bytes] = set()
        wait_until(lambda: seen.update(m.value() for m in consumer.consume(60, 1.0) if not m.error()) or len(seen) >= 60,
                   30, "all 60 records consumed")
        consumer.close()
        assert seen == {f"v{i}".encode() for i in range(60)}

        # alice has no ACL and the authorizer allows nothing without one.
        denied = Producer(_client(brokers[0], stores, "alice", "alice-secret", **{"message.timeout.ms": 5000}))
        errors: list[object] = []
        denied.produce("docs", b"x", on_delivery=lambda err, _msg: errors.append(err))
        denied.flush(15)
        assert errors and errors[0] is not None and "authoriz" in str(errors[0]).lower()

        # A Kerberos setting Kafka changes at run time is taken (and has no effect here).
        resource = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("sasl.kerberos.min.time.before.relogin", "120000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(20)
        wait_until(lambda: "sasl.kerberos.min.time.before.relogin is accepted for compatibility and has no effect"
                   in brokers[0].log_text(), 15, "the change logged as having no effect")
    finally:
        for broker in brokers:
            broker.stop()
    assert "eof_received" not in brokers[0].log_text()


def test_an_unknown_setting_stops_the_broker_with_its_name(tmp_path):
    properties = tmp_path / "server.properties"
    properties.write_text(f"log.dirs={tmp_path / 'data'}\nlisteners=PLAINTEXT://127.0.0.1:0\nlog.retention.hour=24\n")
    result = subprocess.run([sys.executable, "-m", "pykfk.broker", str(properties)],
                            check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "log.retention.hour: unknown configuration key" in result.stderr + result.stdout
