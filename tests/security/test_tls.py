"""TLS settings beyond the basics: client certificates required (ssl.client.auth), a key
store given inline as PEM (KIP-651) with an encrypted key, a PKCS12 key store, and
settings that cannot work refused at start with the setting named."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, Producer
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from pykfk.testing import BrokerProcess


def _reaches(settings: dict[str, str], timeout_s: float = 10) -> KafkaError | None:
    errors: list[KafkaError] = []
    producer = Producer({**settings, "error_cb": errors.append, "reconnect.backoff.ms": 1000})
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        try:
            producer.list_topics(timeout=0.5)
            return None
        except Exception:  # noqa: BLE001 - the error callback says why, or the next try works
            producer.poll(0.1)
    return errors[0] if errors else KafkaError(KafkaError._TIMED_OUT)


def test_client_certificates_required_with_an_inline_encrypted_key(tmp_path, ca):
    server = ca.issue("inline", "localhost", server=True, key_password="k-pw")
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.keystore.key": server.key.read_text(),
        "ssl.keystore.certificate.chain": server.cert.read_text(),
        "ssl.key.password": "k-pw",
        "ssl.truststore.certificates": ca.cert_pem,
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
    }).start()
    try:
        base = {"bootstrap.servers": f"127.0.0.1:{broker.ports['SSL']}", "security.protocol": "SSL",
                "ssl.ca.location": str(ca.cert_path)}
        assert _reaches(base) is not None  # no client certificate: the handshake fails
        client = ca.issue("alice", "Alice")
        assert _reaches({**base, "ssl.certificate.location": str(client.cert),
                         "ssl.key.location": str(client.key)}) is None
        outsider = type(ca)(tmp_path).issue("mallory", "mallory")  # signed by another CA
        assert _reaches({**base, "ssl.certificate.location": str(outsider.cert),
                         "ssl.key.location": str(outsider.key)}) is not None
    finally:
        broker.stop()


def test_a_pkcs12_key_store(tmp_path, ca):
    server = ca.issue("p12", "localhost", server=True)
    key = serialization.load_pem_private_key(server.key.read_bytes(), None)
    from cryptography import x509

    certs = x509.load_pem_x509_certificates(server.cert.read_bytes())
    store = tmp_path / "server.p12"
    store.write_bytes(pkcs12.serialize_key_and_certificates(
        b"server", key, certs[0], certs[1:], serialization.BestAvailableEncryption(b"store-pw")))
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(store), "ssl.keystore.password": "store-pw",
    }).start()
    try:
        assert _reaches({"bootstrap.servers": f"127.0.0.1:{broker.ports['SSL']}", "security.protocol": "SSL",
                         "ssl.ca.location": str(ca.cert_path)}) is None
    finally:
        broker.stop()


@pytest.mark.parametrize("overrides, message", [
    ({"ssl.keystore.location": "/nonexistent.pem"}, "ssl.keystore.location"),
    ({"ssl.client.auth": "required"}, "ssl.truststore.location"),
    ({"ssl.enabled.protocols": "TLSv1.0"}, "ssl.enabled.protocols"),
    ({"ssl.cipher.suites": "NO-SUCH-CIPHER"}, "ssl.cipher.suites"),
    ({"listener.security.protocol.map": "SSL:SASL_SSL", "sasl.enabled.mechanisms": "DIGEST-MD5"},
     "sasl.enabled.mechanisms"),
    ({"listener.security.protocol.map": "SSL:SASL_SSL", "sasl.enabled.mechanisms": "GSSAPI"},
     "sasl.kerberos.service.name"),
    ({"listener.security.protocol.map": "SSL:SASL_SSL", "sasl.enabled.mechanisms": "OAUTHBEARER"},
     "sasl.oauthbearer.jwks.endpoint.url"),
])
def test_unusable_security_settings_stop_the_broker_with_the_setting_named(tmp_path, ca, overrides, message):
    server = ca.issue("bad", "localhost", server=True)
    props = {"listeners": "SSL://127.0.0.1:0", "ssl.keystore.location": str(server.both), **overrides}
    broker = BrokerProcess(str(tmp_path / "data"), props)
    with pytest.raises(RuntimeError) as info:
        broker.start(timeout=30)
    assert message in str(info.value)
