"""SASL/GSSAPI with a real MIT KDC (Debian's krb5-kdc) started on 127.0.0.1: kafka-python
clients (python-gssapi) log in with tickets from keytabs, produce and consume as the
principal the broker's sasl.kerberos.principal.to.local.rules give, under ACLs; a
principal without ACLs is refused; the rules themselves."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest

from pykfk.security.kerberos import KerberosError, KerberosNameMapper
from pykfk.testing import BrokerProcess, RawClient
from tests.security.kdc import REALM, Kdc

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" user_admin="admin-secret";')


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    server = Kdc(tmp_path_factory.mktemp("kdc")).start()
    saved = {k: os.environ.get(k) for k in ("KRB5_CONFIG", "KRB5CCNAME")}
    os.environ["KRB5_CONFIG"] = str(server.krb5_conf)
    yield server
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    server.stop()


@pytest.fixture(scope="module")
def kerberos_broker(tmp_path_factory, kdc):
    keytab = kdc.add_principal("kafka/localhost")
    broker = BrokerProcess(str(tmp_path_factory.mktemp("krb") / "data"), {
        # Clients name the broker's service principal after the host they reach it by.
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://localhost:0",
        "sasl.enabled.mechanisms": "GSSAPI,PLAIN",
        "sasl.kerberos.service.name": "kafka",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.gssapi.sasl.jaas.config":
            f'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true storeKey=true '
            f'keyTab="{keytab}" principal="kafka/localhost@{REALM}";',
        # etl/<host> service principals act as User:etl; people by their name.
        "sasl.kerberos.principal.to.local.rules": f"RULE:[2:$1@$0](etl@{REALM})s/@.*//,DEFAULT",
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "connection.failed.authentication.delay.ms": 20,
        "num.partitions": 1,
    }).start()
    yield broker
    broker.stop()


def _kafka_python_settings(broker: BrokerProcess) -> dict[str, object]:
    return {"bootstrap_servers": f"localhost:{broker.ports['SASL_PLAINTEXT']}", "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "GSSAPI", "sasl_kerberos_service_name": "kafka",
            "sasl_kerberos_domain_name": "localhost", "request_timeout_ms": 10000}


def test_kerberos_clients_produce_and_consume_under_their_mapped_principal(kdc, kerberos_broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    topic = f"krb-{uuid.uuid4().hex[:8]}"
    admin = RawClient("127.0.0.1", kerberos_broker.ports["SASL_PLAINTEXT"])
    assert admin.call(17, 1, {"mechanism": "PLAIN"}).error_code == 0
    assert admin.call(36, 1, {"auth_bytes": b"\0admin\0admin-secret"}).error_code == 0
    for principal, resource_type, name in (("User:etl", 2, topic), ("User:alice", 2, topic),
                                           ("User:alice", 3, "krb-group")):
        answer = admin.call(30, 3, {"creations": [{
            "resource_type": resource_type, "resource_name": name, "resource_pattern_type": 3,
            "principal": principal, "host": "*", "operation": 2, "permission_type": 3}]})
        assert answer.results[0].error_code == 0
    admin.close()

    # etl/batch-host@REALM -> User:etl (the RULE) writes; alice@REALM -> User:alice (DEFAULT) reads.
    os.environ["KRB5CCNAME"] = f"FILE:{kdc.kinit('etl/batch-host', kdc.add_principal('etl/batch-host'))}"
    producer = KafkaProducer(**_kafka_python_settings(kerberos_broker))
    for i in range(5):
        producer.send(topic, f"k{i}".encode()).get(timeout=20)
    producer.close()

    os.environ["KRB5CCNAME"] = f"FILE:{kdc.kinit('alice', kdc.add_principal('alice'))}"
    consumer = KafkaConsumer(topic, group_id="krb-group", auto_offset_reset="earliest",
                             **_kafka_python_settings(kerberos_broker))
    values: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(values) < 5 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
    consumer.close()
    assert sorted(values) == [f"k{i}".encode() for i in range(5)]

    # librdkafka (Debian's kcat, built with Cyrus SASL) logs in with alice's keytab and reads.
    kcat = ["kcat", "-b", f"localhost:{kerberos_broker.ports['SASL_PLAINTEXT']}", "-X", "security.protocol=SASL_PLAINTEXT",
            "-X", "sasl.mechanisms=GSSAPI", "-X", "sasl.kerberos.service.name=kafka",
            "-X", f"sasl.kerberos.keytab={kdc.dir / 'alice.keytab'}", "-X", f"sasl.kerberos.principal=alice@{REALM}"]
    env = {**os.environ, "KRB5CCNAME": f"FILE:{kdc.dir / 'kcat.ccache'}"}
    read = subprocess.run([*kcat, "-C", "-t", topic, "-o", "beginning", "-e", "-q"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert sorted(read.stdout.split()) == [f"k{i}" for i in range(5)], read.stderr

    # mallory has a valid ticket but no ACL: logged in, refused.
    os.environ["KRB5CCNAME"] = f"FILE:{kdc.kinit('mallory', kdc.add_principal('mallory'))}"
    refused = KafkaProducer(**_kafka_python_settings(kerberos_broker), max_block_ms=8000)
    with pytest.raises(TopicAuthorizationFailedError):
        refused.send(topic, b"nope").get(timeout=20)
    refused.close()


def test_principal_to_local_rules():
    mapper = KerberosNameMapper(["RULE:[2:$1@$0](etl@EX.COM)s/@.*//", "RULE:[1:$1@$0](.*@OTHER.COM)s/@.*//L",
                                 "DEFAULT"], realm="EX.COM")
    assert mapper.short_name("etl/host1@EX.COM") == "etl"
    assert mapper.short_name("Bob@OTHER.COM") == "bob"
    assert mapper.short_name("alice@EX.COM") == "alice"
    assert mapper.short_name("kafka/broker1@EX.COM") == "kafka"
    with pytest.raises(KerberosError):
        mapper.short_name("eve@ELSEWHERE.COM")
    with pytest.raises(KerberosError):
        KerberosNameMapper("RULE:[1:$1](unclosed")


def test_garbage_gssapi_tokens_are_refused(kerberos_broker):
    for token in (b"", b"\x60\x82garbage", b"\x00" * 70_000):
        raw = RawClient("127.0.0.1", kerberos_broker.ports["SASL_PLAINTEXT"])
        assert raw.call(17, 1, {"mechanism": "GSSAPI"}).error_code == 0
        answer = raw.call(36, 1, {"auth_bytes": token})
        assert answer.error_code == 58, token[:8]  # SASL_AUTHENTICATION_FAILED
        raw.close()
    assert "Traceback" not in kerberos_broker.log_text()


def test_a_gssapi_session_lasts_no_longer_than_its_ticket(kdc, kerberos_broker):
    """KIP-368: SaslAuthenticate tells the client its session ends with its service
    ticket, and a request after that closes the connection."""
    import struct

    import gssapi

    keytab = kdc.add_principal("brief")
    cache = kdc.dir / "brief.ccache"
    kdc._run("/usr/bin/kinit", "-l", "4s", "-kt", str(keytab), "-c", f"FILE:{cache}", f"brief@{REALM}")
    credentials = gssapi.Credentials(usage="initiate", store={"ccache": f"FILE:{cache}"})
    context = gssapi.SecurityContext(name=gssapi.Name("kafka@localhost", gssapi.NameType.hostbased_service),
                                     creds=credentials, usage="initiate", mech=gssapi.MechType.kerberos)
    raw = RawClient("127.0.0.1", kerberos_broker.ports["SASL_PLAINTEXT"])
    try:
        assert raw.call(17, 1, {"mechanism": "GSSAPI"}).error_code == 0
        answer = raw.call(36, 1, {"auth_bytes": context.step()})
        assert answer.error_code == 0
        if not context.complete:
            context.step(bytes(answer.auth_bytes))
        offer = raw.call(36, 1, {"auth_bytes": b""})  # the broker offers its (no) security layer
        assert offer.error_code == 0 and context.unwrap(bytes(offer.auth_bytes)).message[0] & 1
        done = raw.call(36, 1, {"auth_bytes": context.wrap(struct.pack(">I", (1 << 24) | 0xFFFFFF), False).message})
        assert done.error_code == 0
        assert 0 < done.session_lifetime_ms <= 4000
        assert raw.call(3, 1, {"topics": []}).brokers  # served while the ticket lasts
        time.sleep(done.session_lifetime_ms / 1000 + 0.2)
        raw.send(3, 1, {"topics": []})
        assert raw.is_closed_by_peer()
    finally:
        raw.close()


def test_pykfk_user_principal_maps_kerberos_names(tmp_path):
    import json

    from tests.cli.conftest import PYKFK

    properties = tmp_path / "server.properties"
    properties.write_text(f"sasl.kerberos.principal.to.local.rules=RULE:[2:$1@$0](etl@{REALM})s/@.*//,DEFAULT\n")
    mapped = subprocess.run([*PYKFK, "-o", "json", "user", "principal", f"etl/batch-host@{REALM}", f"alice@{REALM}",
                             "eve@ELSEWHERE", "--broker-config", str(properties), "--realm", REALM],
                            capture_output=True, text=True, timeout=60, check=False)
    assert mapped.returncode == 1  # eve maps to nothing: she cannot log in
    rows = {r["kerberos_name"]: r for r in json.loads(mapped.stdout)}
    assert rows[f"etl/batch-host@{REALM}"]["principal"] == "User:etl"
    assert rows[f"alice@{REALM}"]["principal"] == "User:alice"
    assert rows["eve@ELSEWHERE"]["principal"] == "" and "no rule" in rows["eve@ELSEWHERE"]["error"]
    bad = subprocess.run([*PYKFK, "user", "principal", "a@B", "--rules", "RULE:[1:$1](unclosed"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
