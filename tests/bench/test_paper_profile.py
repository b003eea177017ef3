"""``python -m bench.paper.profile`` samples a real broker and a real confluent-kafka
client through one short batch-1 run and says where each side's time went."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)


def _profile(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench.paper.profile", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=170, check=False)


def _commands_naming(fragment: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if fragment in cmd:
                found.append(cmd)
    return found


def test_batch_1_profile_names_the_produce_path_and_the_client_threads(tmp_path: Path) -> None:
    out = tmp_path / "profile"
    done = _profile("--test", "b1", "--seconds", "2", "-n", "300000", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    summary = (out / "summary.md").read_text()

    busy = re.search(r"broker process: (\d+)% of a core", summary)
    assert busy is not None, summary
    assert int(busy.group(1)) > 0
    # librdkafka's broker I/O thread sends every one-record request: it must show up
    threads = re.search(r"busiest threads[^:]*: (.*)", summary)
    assert threads is not None and "rdk:broker" in threads.group(1), summary

    # the broker was sampled, and a plain Produce runs compiled end to end (the request
    # lane, pykfk._core.append_path.handle, the encoder): no Python frame of the Produce
    # handler shows in its stacks, which end in the event loop's
    collapsed = (out / "broker.collapsed").read_text()
    assert collapsed
    broker_section = summary.split("## Broker", 1)[1].split("## Client", 1)[0]
    assert "Runner.run" in broker_section
    assert "pykfk/server/handlers/produce.py" not in collapsed
    assert "## Client" in summary

    # nothing it started is left running (the broker's data dir names the temp dir)
    assert _commands_naming("pykfk-profile-") == []


def test_bad_options_get_a_clear_message() -> None:
    done = _profile("--seconds", "0")
    assert done.returncode == 2
    assert "must be positive" in done.stderr
    done = _profile("--mock", "--client", "pykfk")
    assert done.returncode == 2
    assert "--mock runs confluent-kafka only" in done.stderr
