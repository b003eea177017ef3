"""A ZooKeeper cluster whose brokers replicate over a SASL_SSL listener of their own while
clients use a PLAINTEXT one; SCRAM users and ACLs kept in ZooKeeper apply at every broker."""

from __future__ import annotations

import json
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from pykfk.testing import wait_until
from tests.security.certs import CertificateAuthority

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-pw" user_broker="broker-pw";')


def test_replication_over_sasl_ssl_and_scram_users_in_zookeeper(cluster_factory, tmp_path):
    ca = CertificateAuthority(tmp_path)
    server = ca.issue("broker", "localhost", server=True)
    cluster = cluster_factory(3, **{
        "listeners": "CLIENT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.internal.plain.sasl.jaas.config": JAAS,
        "ssl.keystore.location": str(server.both),
        "ssl.truststore.location": str(ca.cert_path),
        # Brokers log in to each other as User:broker; the PLAINTEXT clients here act as admins.
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:ANONYMOUS",
    })
    registration = json.loads(cluster.zk.get(cluster.path("/brokers/ids/1"))[0])
    assert registration["listener_security_protocol_map"] == {"CLIENT": "PLAINTEXT", "INTERNAL": "SASL_SSL"}
    assert [e.split("://")[0] for e in registration["endpoints"]] == ["CLIENT", "INTERNAL"]

    cluster.create_topic("secure", 3, 3, **{"min.insync.replicas": 2})
    cluster.wait_for_full_isr("secure", 3)  # followers fetch over SASL_SSL
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5,
                         "enable.idempotence": True, "message.timeout.ms": 60000,
                         "topic.metadata.refresh.interval.ms": 1000})
    failed: list[object] = []
    for i in range(150):
        producer.produce("secure", f"r{i}".encode(), on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(30) == 0

    # kill -9 the leader of partition 0: a new leader is elected from the ISR, acks=all
    # writes go on, and the killed broker catches up again over SASL_SSL once back.
    victim = cluster.leader("secure", 0)
    cluster.brokers[victim].kill()
    wait_until(lambda: cluster.leader("secure", 0) not in (-1, victim), 30, "a new leader of secure-0")
    for i in range(150, 300):
        producer.produce("secure", f"r{i}".encode(), on_delivery=lambda err, _m: failed.append(err) if err else None)
    assert producer.flush(60) == 0
    assert not failed, failed[:3]
    cluster.brokers[victim].start(timeout=60)
    cluster.wait_for_full_isr("secure", 3)

    # A SCRAM user created through broker 0 logs in at broker 2's INTERNAL listener.
    admin = AdminClient({"bootstrap.servers": cluster.brokers[0].bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("reader", info, b"r-pw")])["reader"].result(20)
    assert cluster.zk.exists(cluster.path("/config/users/reader"))
    reader = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(ca.cert_path),
              "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "reader", "sasl.password": "r-pw"}

    def visible_to_reader(broker_id: int) -> bool:
        port = cluster.brokers[broker_id].ports["INTERNAL"]
        return "secure" in AdminClient({**reader, "bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(
            timeout=10).topics

    assert not visible_to_reader(2)
    # ACLs created through broker 0 are enforced by every broker within 5 s.
    bindings = [AclBinding(ResourceType.TOPIC, "secure", ResourcePatternType.LITERAL, "User:reader", "*",
                           AclOperation.READ, AclPermissionType.ALLOW),
                AclBinding(ResourceType.GROUP, "secure-", ResourcePatternType.PREFIXED, "User:reader", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)]
    for future in admin.create_acls(bindings).values():
        future.result(20)
    assert cluster.zk.exists(cluster.path("/kafka-acl/Topic/secure"))
    assert cluster.zk.exists(cluster.path("/kafka-acl-extended/prefixed/Group/secure-"))
    for broker_id in (0, 1, 2):
        wait_until(lambda b=broker_id: visible_to_reader(b), 5, f"the ACL on broker {broker_id}")
    consumer = Consumer({
        "bootstrap.servers": f"127.0.0.1:{cluster.brokers[2].ports['INTERNAL']}",
        "security.protocol": "SASL_SSL", "ssl.ca.location": str(ca.cert_path),
        "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "reader", "sasl.password": "r-pw",
        "group.id": "secure-readers", "auto.offset.reset": "earliest",
    })
    consumer.subscribe(["secure"])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < 300 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"r{i}".encode() for i in range(300))
    wait_until(lambda: all(len(cluster.isr("secure", p)) == 3 for p in range(3)), 10, "full ISR kept")
