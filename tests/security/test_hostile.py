"""Hostile and careless clients on secure listeners: plain bytes on a TLS port, TLS
handshakes that never finish, many connections that never log in. Each is closed, and
the broker keeps serving everyone else with bounded memory."""

from __future__ import annotations

import socket
import time

from confluent_kafka.admin import AdminClient

from pykfk.testing import BrokerProcess, RawClient
from tests.security.conftest import PLAIN_JAAS, client_settings, closed_by_peer_within

IDLE_MS = 2000


def test_plaintext_bytes_on_a_tls_port_close_the_connection(secure_broker, ca):
    raw = RawClient("127.0.0.1", secure_broker.ports["SSL"])
    raw.send(3, 1, {"topics": None})
    assert raw.is_closed_by_peer()
    raw.close()
    assert AdminClient(client_settings(secure_broker, ca, "SSL")).list_topics(timeout=10).brokers


def test_stalled_handshakes_and_idle_logins_are_closed_with_memory_bounded(tmp_path, ca):
    server = ca.issue("hostile", "localhost", server=True)
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "ssl.keystore.location": str(server.both),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.idle.ms": IDLE_MS,
    }).start()
    sockets: list[socket.socket] = []
    try:
        rss_before = broker.rss_kb()
        # A TLS client that connects and never says hello, and a half-sent hello.
        stalled = socket.create_connection(("127.0.0.1", broker.ports["SASL_SSL"]))
        half = socket.create_connection(("127.0.0.1", broker.ports["SASL_SSL"]))
        half.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        # 500 connections that never log in.
        for _ in range(500):
            sockets.append(socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"])))
        settings = client_settings(broker, ca, "SASL_SSL")
        started = time.monotonic()
        assert AdminClient(settings).list_topics(timeout=10).brokers  # others are served meanwhile
        assert time.monotonic() - started < 5
        assert broker.rss_kb() - rss_before < 96 * 1024
        assert closed_by_peer_within(stalled, IDLE_MS / 1000 + 5)
        assert closed_by_peer_within(half, IDLE_MS / 1000 + 5)
        deadline = time.monotonic() + IDLE_MS / 1000 + 5  # idle connections are closed by a periodic sweep
        assert all(closed_by_peer_within(s, max(deadline - time.monotonic(), 0.05)) for s in sockets)
    finally:
        for s in sockets:
            s.close()
        broker.stop()
