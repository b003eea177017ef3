"""pykfk-broker processes as a service manager runs them: a config file, chosen
environment variables (NOTIFY_SOCKET, JOURNAL_STREAM), stderr kept in a file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

START_TIMEOUT_S = 30


class ServiceBroker:
    """``python -m pykfk.broker`` with ``args``; ``stderr`` is what it logged."""

    def __init__(self, tmp_path: Path, args: list[str], env: Mapping[str, str] | None = None):
        self.ready_file = tmp_path / "ready.json"
        self.stderr_path = tmp_path / "broker.stderr"
        command = [sys.executable, "-m", "pykfk.broker", "--ready-file", str(self.ready_file), *args]
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr,
                                         env={**os.environ, **(env or {})})

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def wait_ready(self) -> int:
        """Wait for the ready file; returns the first listener's port."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready_file.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"broker exited with {self.proc.returncode}:\n{self.stderr}")
            if time.monotonic() > deadline:
                raise AssertionError(f"broker not ready after {START_TIMEOUT_S}s:\n{self.stderr}")
            time.sleep(0.02)
        return int(json.loads(self.ready_file.read_text())["port"])

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def service_broker(tmp_path: Path) -> Iterator[object]:
    """A factory: ``service_broker(args, env=None)`` starts a ServiceBroker, stopped at
    the end of the test."""
    started: list[ServiceBroker] = []

    def start(args: list[str], env: Mapping[str, str] | None = None) -> ServiceBroker:
        broker = ServiceBroker(tmp_path, args, env)
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


def loopback_args(tmp_path: Path) -> list[str]:
    """A broker on a free loopback port with its data under ``tmp_path``."""
    return ["--override", f"log.dirs={tmp_path / 'data'}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"]
