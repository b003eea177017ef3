"""The paper's experiments (``python -m bench.paper --quick``) run end to end on tiny N,
so the harness never rots: every system starts on loopback, every client produces and
consumes, results.md and the plots are written, and nothing it started is left running.
Throughput figures are not asserted (the machine is shared; they are meaningless at
this N)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(240)


def _processes() -> dict[int, str]:
    """PID -> command line of every process (from /proc)."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found[int(entry)] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
    return found


def test_quick_mode_runs_every_system_and_client(tmp_path: Path) -> None:
    out = tmp_path / "results"
    work = tmp_path / "work"
    before = _processes()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.paper", "--quick", "-n", "500", "--max-seconds", "15",
         "--no-progress", "--out", str(out), "--workdir", str(work)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        output, _ = proc.communicate(timeout=220)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"bench.paper --quick did not finish:\n{output[-4000:]}")
    assert proc.returncode == 0, output[-4000:]

    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["skipped"] == [], data["meta"]["skipped"]
    runs = {(r["system"], r["client"], r["test"]): r for r in data["runs"]}
    expected_clients = {
        "pykfk": ["confluent", "kafka-python", "pykfk"],
        "mock": ["confluent"],
        "rabbitmq": ["java", "pika"],
        "activemq": ["java", "stomp"],
    }
    for system, clients in expected_clients.items():
        for client in clients:
            tests = ["produce b1", "consume"]
            if client not in ("pika", "stomp"):  # one message a publish whatever is asked
                tests += ["produce b50", "produce bdefault"]
            for test in tests:
                run = runs.get((system, client, test))
                assert run is not None, f"no run for {system}/{client} {test}"
                assert run["error"] == "", (system, client, test, run["error"])
                # every message sent was stored and read back
                assert run["count"] >= 500, (system, client, test, run["count"])
                assert run["seconds"] > 0
                if system != "mock":
                    assert run["broker_cpu"] is not None and run["broker_peak_rss_kb"] > 0

    # pykfk's on-disk batches follow the batch settings: one record a batch at b1,
    # ~50 at b50 (what the paper compares), and every record sent is stored.
    for client in expected_clients["pykfk"]:
        b1 = runs[("pykfk", client, "produce b1")]
        assert b1["stored_records"] == b1["count"] == b1["stored_batches"]
        b50 = runs[("pykfk", client, "produce b50")]
        assert b50["stored_records"] == b50["count"]
        assert 25 <= b50["stored_records"] / b50["stored_batches"] <= 50
    assert runs[("rabbitmq", "java", "produce b1")]["disk_bytes"] > 0
    # Python clients report their busiest threads (librdkafka's own are rdk:*)
    threads = runs[("pykfk", "confluent", "produce b1")]["client_threads"]
    assert any(name.startswith("rdk:") for name, _ in threads), threads
    # (no upper bound: CPU time comes in 10 ms clock ticks, longer than a --quick run)
    assert all(share >= 0 for _, share in threads), threads

    markdown = (out / "results.md").read_text()
    assert "## Targets (issue 8)" in markdown
    assert "| produce b50 | pykfk | confluent |" in markdown
    assert "busy: broker · client's busiest thread" in markdown
    for png in ("producer.png", "consumer.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Every broker, epmd and client it started was stopped (brokers' command lines name
    # their data dirs under ``work``; epmd does not, so compare with the list before).
    after = _processes()
    assert [cmd for cmd in after.values() if str(work) in cmd] == []
    new_epmd = [cmd for pid, cmd in after.items() if pid not in before and cmd.startswith("epmd")]
    assert new_epmd == []
