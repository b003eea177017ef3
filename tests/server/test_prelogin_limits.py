"""Limits on clients that have not logged in, and what a closed connection leaves behind,
against a broker process: frames above ``sasl.server.max.receive.size`` before login are
refused at the size header, a frame cut off by a close is freed at once (no waiting for
the cyclic collector), and TLS clients that disconnect leave no warning in the log."""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import time

import pytest
from confluent_kafka import Producer

from pykfk.testing import BrokerProcess
from tests.security.certs import CertificateAuthority
from tests.security.conftest import PLAIN_JAAS

ANNOUNCED = 64 * 1024 * 1024
RSS_GROWTH_LIMIT_KB = 20 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    ca = CertificateAuthority(tmp_path_factory.mktemp("ca"))
    server = ca.issue("server", "localhost", server=True)
    broker = BrokerProcess(str(tmp_path_factory.mktemp("prelogin") / "data"), {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.location": str(server.both),
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "message.max.bytes": 2 * 1024 * 1024,
    }).start()
    broker.ca = ca
    yield broker
    broker.stop()


def _stream(sock: socket.socket, limit: int, deadline: float) -> int:
    """Send up to ``limit`` body bytes of the announced frame; the count sent before the
    broker closed the connection (or ``limit``)."""
    sock.settimeout(max(deadline - time.monotonic(), 0.1))
    chunk = b"\x00" * 65536
    sent = 0
    with contextlib.suppress(OSError):
        while sent < limit and time.monotonic() < deadline:
            sock.sendall(chunk)
            sent += len(chunk)
    return sent


def _closed(sock: socket.socket, timeout: float = 5.0) -> bool:
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


def _rss_settles_near(broker: BrokerProcess, baseline_kb: int, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        growth = broker.rss_kb() - baseline_kb
        if growth < RSS_GROWTH_LIMIT_KB or time.monotonic() > deadline:
            return growth
        time.sleep(0.1)


def test_frames_above_the_prelogin_limit_close_the_connection(broker):
    baseline = broker.rss_kb()
    sockets = [socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"])) for _ in range(10)]
    try:
        deadline = time.monotonic() + 10
        for sock in sockets:
            sock.sendall(struct.pack(">i", ANNOUNCED))
        # Each announces 64 MiB and tries to stream 6 MiB of it: on a broker without the
        # limit that is 60 MiB held; with it the broker closes at the size header.
        for sock in sockets:
            _stream(sock, 6 * 1024 * 1024, deadline)
        assert all(_closed(sock) for sock in sockets)
        assert broker.rss_kb() - baseline < RSS_GROWTH_LIMIT_KB
        assert "above 524288 (sasl.server.max.receive.size)" in broker.log_text()
    finally:
        for sock in sockets:
            sock.close()
    # A client that has logged in may send frames up to socket.request.max.bytes.
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}",
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "alice", "sasl.password": "alice-secret",
                         "compression.type": "none", "message.max.bytes": 2 * 1024 * 1024})
    reports = []
    producer.produce("big", b"x" * (900 * 1024), on_delivery=lambda err, msg: reports.append(err))
    assert producer.flush(20) == 0
    assert reports == [None]


def test_a_frame_cut_off_by_a_close_is_freed_at_once(broker):
    """Announced on a PLAINTEXT listener (no login there, so no prelogin limit): 10 x 6
    MiB held while the frames arrive, given back as soon as the clients go away."""
    baseline = broker.rss_kb()
    sockets = [socket.create_connection(("127.0.0.1", broker.ports["PLAINTEXT"])) for _ in range(10)]
    try:
        deadline = time.monotonic() + 15
        for sock in sockets:
            sock.sendall(struct.pack(">i", ANNOUNCED))
            _stream(sock, 6 * 1024 * 1024, deadline)
        held = 0
        while time.monotonic() < deadline:  # what was sent has reached the broker
            held = broker.rss_kb() - baseline
            if held > 40 * 1024:
                break
            time.sleep(0.05)
        assert held > 40 * 1024
    finally:
        for sock in sockets:
            sock.close()
    assert _rss_settles_near(broker, baseline) < RSS_GROWTH_LIMIT_KB


def test_tls_clients_that_disconnect_leave_no_warning(broker):
    context = ssl.create_default_context(cafile=str(broker.ca.cert_path))
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", broker.ports["SASL_SSL"])) as raw, \
                context.wrap_socket(raw, server_hostname="localhost") as tls:
            tls.unwrap()  # close_notify, then EOF
    producer = Producer({"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_SSL']}",
                         "security.protocol": "SASL_SSL", "ssl.ca.location": str(broker.ca.cert_path),
                         "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"})
    producer.produce("tls", b"v")
    assert producer.flush(20) == 0
    del producer
    time.sleep(0.5)
    assert "eof_received" not in broker.log_text()
