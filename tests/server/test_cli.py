"""The pykfk-broker process raises its soft open-files limit to the hard one at start."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time

LOW_SOFT_LIMIT = 1024


def _open_files_limits(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no open files line in /proc/<pid>/limits")


def test_the_broker_raises_its_soft_open_files_limit(tmp_path):
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard > LOW_SOFT_LIMIT, "this check needs a hard limit above 1024"
    ready = tmp_path / "ready.json"
    # The broker as `python -m pykfk.broker` in a process started with a low soft limit.
    start = ("import resource, runpy, sys; "
             f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW_SOFT_LIMIT}, {hard})); "
             "sys.argv[0] = 'pykfk-broker'; runpy.run_module('pykfk.broker', run_name='__main__')")
    log_path = tmp_path / "broker.log"
    with open(log_path, "w", encoding="utf-8") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", start, "--ready-file", str(ready),
             "--override", f"log.dirs={tmp_path / 'data'}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=log_file,
        )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), "the broker did not start"
        assert json.loads(ready.read_text())["pid"] == proc.pid
        assert _open_files_limits(proc.pid) == (hard, hard)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert f"open files limit raised from {LOW_SOFT_LIMIT} to {hard}" in log_path.read_text()
    assert os.path.exists(tmp_path / "data")
