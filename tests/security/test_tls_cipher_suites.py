"""ssl.cipher.suites as Kafka reads it, checked from the client side of real handshakes: by
default a server picks TLS_AES_128_GCM_SHA256 even from a client that offers AES-256
first; a configured TLS 1.3 suite is the one negotiated and a client without it is
refused; a TLS 1.2-only list leaves TLS 1.2 with that suite; records go through a
configured suite with confluent-kafka and kafka-python; a list that cannot work stops the
broker with the setting named."""

from __future__ import annotations

import socket
import ssl
import subprocess

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.security import tls
from pykfk.testing import BrokerProcess
from tests.security.conftest import client_settings


def _handshake(port: int, cafile: str, client_suites: tuple[str, ...] | None = None,
               maximum: ssl.TLSVersion | None = None) -> tuple[str, str]:
    """(TLS version, cipher suite) of a handshake with the broker's listener on ``port``."""
    context = ssl.create_default_context(cafile=cafile)
    if client_suites is not None:
        assert tls.set_tls13_suites(context, client_suites)
    if maximum is not None:
        context.maximum_version = maximum
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as sock:
        name, version, _bits = sock.cipher()
        return version, name


def _ssl_broker(tmp_path, ca, **overrides: str) -> BrokerProcess:
    server = ca.issue("suites", "localhost", server=True)
    return BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(server.both),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            'org.apache.kafka.common.security.plain.PlainLoginModule required '
            'user_alice="alice-secret";',
        **overrides,
    }).start()


def test_the_server_prefers_aes_128_gcm_by_default(tmp_path, ca):
    broker = _ssl_broker(tmp_path, ca)
    try:
        port, cafile = broker.ports["SSL"], str(ca.cert_path)
        # Python's client (OpenSSL's default order) offers TLS_AES_256_GCM_SHA384 first.
        assert _handshake(port, cafile) == ("TLSv1.3", "TLS_AES_128_GCM_SHA256")
        # The rest of the default set is still accepted.
        assert _handshake(port, cafile, ("TLS_AES_256_GCM_SHA384",)) == ("TLSv1.3", "TLS_AES_256_GCM_SHA384")
        assert _handshake(port, cafile, ("TLS_CHACHA20_POLY1305_SHA256",)) == \
            ("TLSv1.3", "TLS_CHACHA20_POLY1305_SHA256")
        assert _handshake(port, cafile, maximum=ssl.TLSVersion.TLSv1_2)[0] == "TLSv1.2"
        # openssl's own client sees the same choice.
        out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", cafile,
                              "-servername", "localhost", "-brief"],
                             check=False, input=b"", capture_output=True, timeout=30)
        assert b"TLS_AES_128_GCM_SHA256" in out.stdout + out.stderr
    finally:
        broker.stop()


def test_a_configured_tls13_suite_is_the_one_negotiated_and_records_go_through(tmp_path, ca):
    broker = _ssl_broker(tmp_path, ca, **{"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384,TLS_CHACHA20_POLY1305_SHA256"})
    try:
        port, cafile = broker.ports["SSL"], str(ca.cert_path)
        assert _handshake(port, cafile, ("TLS_AES_128_GCM_SHA256", "TLS_CHACHA20_POLY1305_SHA256",
                                         "TLS_AES_256_GCM_SHA384")) == ("TLSv1.3", "TLS_AES_256_GCM_SHA384")
        assert _handshake(port, cafile, ("TLS_CHACHA20_POLY1305_SHA256",)) == \
            ("TLSv1.3", "TLS_CHACHA20_POLY1305_SHA256")
        with pytest.raises(ssl.SSLError):
            _handshake(port, cafile, ("TLS_AES_128_GCM_SHA256",))
        # TLS 1.3 suites only: no TLS 1.2.
        with pytest.raises(ssl.SSLError):
            _handshake(port, cafile, maximum=ssl.TLSVersion.TLSv1_2)

        topic, count = "suites", 3000
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL",
                             "ssl.ca.location": cafile})
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        sasl = client_settings(broker, ca, "SASL_SSL")
        values = [i.to_bytes(4, "big") * 256 for i in range(count)]
        producer = Producer({**sasl, "linger.ms": 5})
        for value in values:
            producer.produce(topic, value)
        assert producer.flush(30) == 0
        consumer = Consumer({**sasl, "group.id": "suites", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got: list[bytes] = []
        try:
            for _ in range(60):
                got += [m.value() for m in consumer.consume(1000, 0.5) if m.error() is None]
                if len(got) >= count:
                    break
        finally:
            consumer.close()
        assert got == values

        from kafka import KafkaConsumer, KafkaProducer

        kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL", ssl_cafile=cafile,
                           ssl_check_hostname=False)
        for value in values[:500]:
            kp.send(topic, value)
        kp.flush(30)
        kp.close()
        kc = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SSL", ssl_cafile=cafile,
                           ssl_check_hostname=False, auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                           group_id=None)
        from kafka import TopicPartition as KafkaTopicPartition

        kc.assign([KafkaTopicPartition(topic, 0)])
        kc.seek_to_beginning()
        read = []
        for message in kc:
            read.append(message.value)
            if len(read) == count + 500:
                break
        kc.close()
        assert read == values + values[:500]
    finally:
        broker.stop()


def test_a_tls12_only_list_leaves_tls12_with_that_suite(tmp_path, ca):
    broker = _ssl_broker(tmp_path, ca, **{"ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256"})
    try:
        port, cafile = broker.ports["SSL"], str(ca.cert_path)
        assert _handshake(port, cafile) == ("TLSv1.2", "ECDHE-ECDSA-AES128-GCM-SHA256")
    finally:
        broker.stop()


@pytest.mark.parametrize("overrides", [
    {"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256", "ssl.enabled.protocols": "TLSv1.2"},
    {"ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256", "ssl.enabled.protocols": "TLSv1.3"},
])
def test_a_list_that_cannot_work_stops_the_broker(tmp_path, ca, overrides):
    server = ca.issue("bad-suites", "localhost", server=True)
    broker = BrokerProcess(str(tmp_path / "data"), {"listeners": "SSL://127.0.0.1:0",
                                                   "ssl.keystore.location": str(server.both), **overrides})
    with pytest.raises(RuntimeError) as info:
        broker.start(timeout=30)
    assert "ssl.cipher.suites" in str(info.value)


def test_the_tls13_suites_of_a_context_are_set_in_order():
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    options = context.options
    assert tls.set_tls13_suites(context, ("TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"))
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"] == \
        ["TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256"]
    assert context.options == options  # the pointer check put back the option it flipped
