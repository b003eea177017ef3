"""connections.max.reauth.ms (KIP-368): a SASL session expires; librdkafka logs in again
on the same connection and keeps producing, a client that does not is disconnected."""

from __future__ import annotations

import time

from confluent_kafka import Producer

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient
from tests.security.conftest import PLAIN_JAAS

REAUTH_MS = 1500


def test_sessions_expire_and_clients_log_in_again(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": REAUTH_MS,
    }).start()
    try:
        port = broker.ports["SASL_PLAINTEXT"]
        raw = RawClient("127.0.0.1", port)
        assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
        login = raw.call(36, 1, {"auth_bytes": b"\0alice\0alice-secret"})
        assert login.error_code == ErrorCode.NONE and login.session_lifetime_ms == REAUTH_MS
        assert raw.call(3, 1, {"topics": None}).brokers  # served while the session lasts

        delivered: list[int] = []
        producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret",
                             "linger.ms": 0})
        deadline = time.monotonic() + REAUTH_MS / 1000 * 3
        sent = 0
        while time.monotonic() < deadline:
            producer.produce("reauth", b"v", on_delivery=lambda err, _m: delivered.append(0 if err else 1))
            sent += 1
            producer.poll(0.05)
        assert producer.flush(20) == 0
        assert delivered.count(1) == sent  # every record through three session lifetimes

        # The raw client's session began before the producer's three lifetimes and it
        # never logged in again: its next request ends the connection.
        raw.send(3, 1, {"topics": None})
        assert raw.is_closed_by_peer()
        raw.close()
    finally:
        broker.stop()
