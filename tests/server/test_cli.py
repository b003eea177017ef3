"""The pykfk-broker process and its open-files limit: raised to the hard limit at start,
and new partitions that would not fit under it refused up front."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

LOW_SOFT_LIMIT = 1024
TIMEOUT_S = 30


def _open_files_limits(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits", encoding="ascii") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no open files line in /proc/<pid>/limits")


@contextmanager
def broker_with_limits(tmp_path: Path, soft: int, hard: int) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """``python -m pykfk.broker`` in a process started with these open-files limits;
    yields the process and its port, and checks it stops cleanly on SIGTERM."""
    ready = tmp_path / "ready.json"
    start = ("import resource, runpy, sys; "
             f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
             "sys.argv[0] = 'pykfk-broker'; runpy.run_module('pykfk.broker', run_name='__main__')")
    with open(tmp_path / "broker.log", "w", encoding="utf-8") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-c", start, "--ready-file", str(ready),
             "--override", f"log.dirs={tmp_path / 'data'}", "--override", "listeners=PLAINTEXT://127.0.0.1:0"],
            stdout=subprocess.DEVNULL, stderr=log_file,
        )
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), (tmp_path / "broker.log").read_text()
        yield proc, json.loads(ready.read_text())["port"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=TIMEOUT_S)
    assert proc.returncode == 0


def test_the_broker_raises_its_soft_open_files_limit(tmp_path):
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert hard > LOW_SOFT_LIMIT, "this check needs a hard limit above 1024"
    with broker_with_limits(tmp_path, LOW_SOFT_LIMIT, hard) as (proc, _port):
        assert _open_files_limits(proc.pid) == (hard, hard)
    log_text = (tmp_path / "broker.log").read_text()
    assert f"open files limit raised from {LOW_SOFT_LIMIT} to {hard}" in log_text


def _refused(future: object) -> str:
    try:
        future.result(TIMEOUT_S)  # type: ignore[attr-defined]
    except KafkaException as exc:
        error = exc.args[0]
        return f"{error.name()}: {error.str()}"
    raise AssertionError("accepted")


def test_partitions_beyond_the_open_files_limit_are_refused_up_front(tmp_path):
    """A broker whose hard limit is 512 files refuses a 1,000-partition topic with
    INVALID_PARTITIONS and a message naming the limit, and keeps serving."""
    with broker_with_limits(tmp_path, 512, 512) as (_proc, port):
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        refused = _refused(admin.create_topics([NewTopic("huge", 1000, 1)], request_timeout=TIMEOUT_S)["huge"])
        assert refused.startswith("INVALID_PARTITIONS") and "limit is 512" in refused
        admin.create_topics([NewTopic("fits", 20, 1)], request_timeout=TIMEOUT_S)["fits"].result(TIMEOUT_S)
        grow = admin.create_partitions([NewPartitions("fits", 1000)], request_timeout=TIMEOUT_S)["fits"]
        assert _refused(grow).startswith("INVALID_PARTITIONS")
        assert len(admin.list_topics(timeout=TIMEOUT_S).topics["fits"].partitions) == 20
