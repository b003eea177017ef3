"""A broker process with every kind of listener, and the certificates it uses."""

from __future__ import annotations

import socket

import pytest

from pykfk.testing import BrokerProcess
from tests.security.certs import CertificateAuthority

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'username="admin" password="admin-secret" '
              'user_admin="admin-secret" user_alice="alice-secret";')
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return CertificateAuthority(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, ca):
    """PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners on one broker; PLAIN users
    admin and alice, SCRAM enabled (users are added through the admin API)."""
    server = ca.issue("server", "localhost", server=True)
    overrides = {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        "ssl.keystore.location": str(server.both),
        "ssl.truststore.location": str(ca.cert_path),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "connection.failed.authentication.delay.ms": 50,
        "num.partitions": 2,
    }
    broker = BrokerProcess(str(tmp_path_factory.mktemp("secure") / "data"), overrides).start()
    yield broker
    broker.stop()


def client_settings(broker: BrokerProcess, ca: CertificateAuthority, listener: str, **sasl: str) -> dict[str, str]:
    """confluent-kafka settings reaching ``listener`` of ``broker``."""
    settings = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}", "security.protocol": listener}
    if "SSL" in listener:
        settings["ssl.ca.location"] = str(ca.cert_path)
    if "SASL" in listener:
        settings.update({"sasl.mechanism": sasl.get("mechanism", "PLAIN"),
                         "sasl.username": sasl.get("user", "alice"),
                         "sasl.password": sasl.get("password", "alice-secret")})
    return settings


def closed_by_peer_within(sock: socket.socket, timeout_s: float) -> bool:
    """True once the broker has closed ``sock`` (EOF or reset) within ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
        return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
