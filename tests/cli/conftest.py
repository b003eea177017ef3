"""Helpers for driving the ``pykfk`` command the way an operator does: a subprocess,
its exit code, its stdout and stderr, its JSON parsed."""

from __future__ import annotations

import json
import os
import pty
import select
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from pykfk.testing import BrokerProcess

# The console script pip installs; ``python -m pykfk.cli.main`` is the same program.
_SCRIPT = shutil.which("pykfk", path=os.path.dirname(sys.executable)) or shutil.which("pykfk")
PYKFK = [_SCRIPT] if _SCRIPT else [sys.executable, "-m", "pykfk.cli.main"]
COMMAND_TIMEOUT = 60


class Result:
    def __init__(self, proc: subprocess.CompletedProcess[str]):
        self.code = proc.returncode
        self.out = proc.stdout
        self.err = proc.stderr

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]

    def __repr__(self) -> str:
        return f"exit {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}"


class Pykfk:
    """``pykfk(...)`` runs the command against one broker; ``expect_ok`` asserts exit 0."""

    def __init__(self, bootstrap: str | None):
        self.bootstrap = bootstrap

    def __call__(self, *args: str, input: str | None = None, env: dict[str, str] | None = None,
                 bootstrap: bool = True) -> Result:
        command = [*PYKFK, *args]
        # The broker is named the way a shell session would: PYKFK_BOOTSTRAP.
        full_env = {**os.environ, **(env or {})}
        if self.bootstrap and bootstrap:
            full_env["PYKFK_BOOTSTRAP"] = self.bootstrap
        proc = subprocess.run(command, input=input, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, env=full_env, check=False)
        result = Result(proc)
        assert "Traceback" not in result.err, result
        return result

    def ok(self, *args: str, input: str | None = None) -> Result:
        result = self(*args, input=input)
        assert result.code == 0, result
        return result


def on_terminal(pykfk: Pykfk, *args: str, typed: str = "") -> Result:
    """Run ``pykfk`` with stdin and stderr on a pseudo-terminal, as in an interactive
    shell (prompts, progress bars), ``typed`` as what the person types; stdout is piped.
    The Result's ``err`` is what the terminal showed on stderr."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "100"}
    if pykfk.bootstrap:
        env["PYKFK_BOOTSTRAP"] = pykfk.bootstrap
    proc = subprocess.Popen([*PYKFK, *args], stdin=slave, stdout=subprocess.PIPE, stderr=slave,
                            env=env, text=True)
    os.close(slave)
    if typed:
        os.write(master, typed.encode())
    shown = bytearray()
    deadline = time.monotonic() + COMMAND_TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait(timeout=COMMAND_TIMEOUT)
    result = Result(subprocess.CompletedProcess(args, proc.returncode, out,
                                                shown.decode("utf-8", "replace")))
    assert "Traceback" not in result.err, result
    return result


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker process for a test module (each test uses its own topics and groups)."""
    process = BrokerProcess(str(tmp_path_factory.mktemp("cli") / "data"),
                            {"group.initial.rebalance.delay.ms": 0})
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def pykfk(broker: BrokerProcess) -> Pykfk:
    return Pykfk(broker.bootstrap)


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
