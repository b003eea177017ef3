"""Readiness under systemd (Type=notify): READY=1 reaches $NOTIFY_SOCKET only once the
broker answers Metadata, STOPPING=1 as SIGTERM starts the shutdown; sd_notify's
addressing (a path, or "@" for the abstract namespace)."""

from __future__ import annotations

import os
import re
import signal
import socket
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from pykfk.service.notify import notify, watchdog_interval_s

from .conftest import START_TIMEOUT_S, loopback_args


def _receive(sock: socket.socket) -> dict[str, str]:
    message = sock.recv(4096).decode("utf-8")
    return dict(line.split("=", 1) for line in message.splitlines())


def _receive_until(sock: socket.socket, key: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """The first notification that sets ``key``, and every one before it."""
    before = []
    while True:
        message = _receive(sock)
        if key in message:
            return message, before
        before.append(message)


@pytest.fixture
def notify_socket(tmp_path: Path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(tmp_path / "notify.sock"))
        sock.settimeout(START_TIMEOUT_S)
        yield sock


def test_ready_once_metadata_answers_and_stopping_at_sigterm(tmp_path, notify_socket, service_broker):
    broker = service_broker(loopback_args(tmp_path), env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    ready, before = _receive_until(notify_socket, "READY")
    assert ready["READY"] == "1"
    assert all("READY" not in m for m in before)
    # The broker has logged that it serves, and says where, by the time it is ready.
    assert "broker 0 started" in broker.stderr
    port = int(re.search(r"PLAINTEXT://127\.0\.0\.1:(\d+)", ready["STATUS"]).group(1))
    metadata = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"}).list_topics(timeout=5)
    assert list(metadata.brokers) == [0]
    assert metadata.controller_id == 0

    broker.proc.send_signal(signal.SIGTERM)
    stopping, _ = _receive_until(notify_socket, "STOPPING")
    assert stopping["STOPPING"] == "1"
    assert broker.proc.wait(START_TIMEOUT_S) == 0


def test_a_reload_is_framed_by_reloading_and_ready(tmp_path, notify_socket, service_broker):
    config = tmp_path / "server.properties"
    config.write_text(f"log.dirs={tmp_path / 'data'}\nlisteners=PLAINTEXT://127.0.0.1:0\n", encoding="utf-8")
    broker = service_broker([str(config)], env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
    _receive_until(notify_socket, "READY")
    broker.proc.send_signal(signal.SIGHUP)
    reloading, _ = _receive_until(notify_socket, "RELOADING")
    assert reloading["RELOADING"] == "1"
    assert int(reloading["MONOTONIC_USEC"]) > 0
    ready, _ = _receive_until(notify_socket, "READY")
    assert ready["STATUS"].startswith("serving on PLAINTEXT://127.0.0.1:")
    assert "no dynamic setting changed" in broker.stderr


def test_the_event_loop_pings_the_watchdog(tmp_path, notify_socket, service_broker):
    broker = service_broker(loopback_args(tmp_path), env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
                                                          "WATCHDOG_USEC": "200000"})
    _receive_until(notify_socket, "READY")
    for _ in range(3):  # every 100 ms, half of WatchdogSec=200ms
        assert _receive_until(notify_socket, "WATCHDOG")[0]["WATCHDOG"] == "1"
    assert broker.stop() == 0


def test_the_watchdog_interval_is_half_the_timeout_for_this_process(monkeypatch):
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    monkeypatch.delenv("WATCHDOG_USEC", raising=False)
    assert watchdog_interval_s() is None
    monkeypatch.setenv("WATCHDOG_USEC", "30000000")
    assert watchdog_interval_s() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert watchdog_interval_s() == 15.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))  # meant for another process
    assert watchdog_interval_s() is None


def test_no_ready_notification_when_the_broker_cannot_start(tmp_path, notify_socket, service_broker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        broker = service_broker(["--override", f"log.dirs={tmp_path / 'data'}",
                                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"],
                                env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        assert broker.proc.wait(START_TIMEOUT_S) == 1
    notify_socket.settimeout(0.5)
    messages = []
    try:
        while True:
            messages.append(_receive(notify_socket))
    except TimeoutError:
        pass
    assert all("READY" not in m for m in messages), messages


def test_notify_sends_one_datagram_to_a_path(tmp_path, notify_socket, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify.sock"))
    assert notify("READY=1", "STATUS=serving")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=serving"


def test_notify_reaches_an_abstract_socket(monkeypatch):
    name = f"pykfk-test-{os.getpid()}-{os.urandom(4).hex()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert notify("STOPPING=1")
        assert sock.recv(4096) == b"STOPPING=1"


def test_notify_is_a_no_op_outside_a_notify_service(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert not notify("READY=1")
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    assert not notify("READY=1")  # a failed send is logged, not raised
    assert "cannot notify the service manager" in caplog.text
