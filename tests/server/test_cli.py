"""The pykfk-broker process and its open-files limit: raised to the hard limit at start,
and new partitions that would not fit under it refused up front."""

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


def test_partitions_beyond_the_open_files_limit_are_refused_up_front(tmp_path):
    """A broker whose hard limit is 512 files refuses a 1,000-partition topic with
    INVALID_PARTITIONS and a message naming the limit, and keeps serving."""
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    ready = tmp_path / "ready.json"
    start = ("import resource, runpy, sys; "
             "resource.setrlimit(resource.RLIMIT_NOFILE, (512, 512)); "
             "sys.argv[0] = 'pykfk-broker'; runpy.run_module('pykfk.broker', run_name='__main__')")
    with open(tmp_path / "broker.log", "w", encoding="utf-8") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", start, "--ready-file", str(ready),
             "--override", f"log.dirs={tmp_path / 'data'}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=log_file,
        )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        port = json.loads(ready.read_text())["port"]
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        too_many = admin.create_topics([NewTopic("huge", 1000, 1)], request_timeout=30)["huge"]
        try:
            too_many.result(30)
            raise AssertionError("a 1,000-partition topic was created under a 512-file limit")
        except Exception as exc:  # noqa: BLE001 - the KafkaException is the finding
            error = exc.args[0]
            assert error.name() == "INVALID_PARTITIONS", error
            assert "limit is 512" in error.str()
        admin.create_topics([NewTopic("fits", 20, 1)], request_timeout=30)["fits"].result(30)
        grow = admin.create_partitions([NewPartitions("fits", 1000)], request_timeout=30)["fits"]
        try:
            grow.result(30)
            raise AssertionError("growing to 1,000 partitions was accepted")
        except Exception as exc:  # noqa: BLE001
            assert exc.args[0].name() == "INVALID_PARTITIONS"
        assert len(admin.list_topics(timeout=30).topics["fits"].partitions) == 20
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
