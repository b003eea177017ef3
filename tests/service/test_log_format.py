"""pykfk-broker's log on stderr: readable lines by default, JSON lines with
``--log-format json`` (time, level, logger, message, exception), and journal priority
prefixes when stderr is the journal."""

from __future__ import annotations

import datetime
import json
import os
import socket
import subprocess
import sys

from .conftest import START_TIMEOUT_S, loopback_args


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_json_lines_from_start_to_stop(tmp_path, service_broker):
    broker = service_broker(["--log-format", "json", *loopback_args(tmp_path)])
    broker.wait_ready()
    assert broker.stop() == 0
    entries = _json_lines(broker.stderr)  # every line parses
    assert entries
    for entry in entries:
        assert set(entry) == {"time", "level", "logger", "message"}
        assert entry["time"].endswith("Z")
        datetime.datetime.fromisoformat(entry["time"].removesuffix("Z"))
        assert entry["level"] in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
    messages = [(e["logger"], e["message"]) for e in entries]
    assert any(logger == "pykfk.broker" and message.startswith("broker 0 started") for logger, message in messages)
    assert ("pykfk.broker", "broker 0 stopped") in messages


def test_a_failed_start_logs_its_exception_as_json(tmp_path, service_broker):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        broker = service_broker(["--log-format", "json", "--log-level", "DEBUG",
                                 "--override", f"log.dirs={tmp_path / 'data'}",
                                 "--override", f"listeners=PLAINTEXT://127.0.0.1:{taken.getsockname()[1]}"])
        assert broker.proc.wait(START_TIMEOUT_S) == 1
    failures = [e for e in _json_lines(broker.stderr) if e["level"] == "ERROR"]
    assert failures[0]["message"].startswith("cannot start")
    assert "Traceback" in failures[0]["exception"]
    assert "address already in use" in failures[0]["exception"].lower()


def test_a_bad_setting_is_reported_as_json_too():
    result = subprocess.run([sys.executable, "-m", "pykfk.broker", "--log-format", "json",
                             "--override", "no.such.setting=1"],
                            capture_output=True, text=True, timeout=START_TIMEOUT_S, check=False)
    assert result.returncode == 2
    (entry,) = _json_lines(result.stderr)
    assert entry["level"] == "ERROR"
    assert "no.such.setting" in entry["message"]


def test_text_lines_by_default(tmp_path, service_broker):
    broker = service_broker(loopback_args(tmp_path))
    broker.wait_ready()
    assert broker.stop() == 0
    started = [line for line in broker.stderr.splitlines() if "broker 0 started" in line]
    assert len(started) == 1
    # 2026-11-26 09:12:00,123 INFO pykfk.broker: broker 0 started: ...
    date, _time_of_day, level, logger = started[0].split(" ")[:4]
    datetime.date.fromisoformat(date)
    assert (level, logger) == ("INFO", "pykfk.broker:")


def test_priority_prefixes_when_stderr_is_the_journal(tmp_path, service_broker):
    # systemd names the journal stream it gave the service by device and inode.
    stderr_file = tmp_path / "broker.stderr"
    stderr_file.touch()
    st = os.stat(stderr_file)
    broker = service_broker(loopback_args(tmp_path), env={"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
    broker.wait_ready()
    assert broker.stop() == 0
    lines = broker.stderr.splitlines()
    assert "<6>INFO pykfk.broker: broker 0 stopped" in lines
    assert all(line[:3] in {"<2>", "<3>", "<4>", "<6>", "<7>"} for line in lines), lines


def test_warnings_and_uncaught_exceptions_stay_json():
    code = (
        "import threading, warnings\n"
        "from pykfk.service.log_format import configure_logging\n"
        "configure_logging('INFO', 'json')\n"
        "warnings.warn('an old setting')\n"
        "def fail(): raise ValueError('in a thread')\n"
        "t = threading.Thread(target=fail, name='worker'); t.start(); t.join()\n"
        "raise RuntimeError('nothing caught this')\n"
    )
    result = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True,
                            timeout=START_TIMEOUT_S, check=False)
    assert result.returncode == 1
    warning, in_thread, uncaught = _json_lines(result.stderr)
    assert (warning["level"], warning["logger"]) == ("WARNING", "py.warnings")
    assert "an old setting" in warning["message"]
    assert in_thread["message"] == "uncaught ValueError in thread worker"
    assert "ValueError: in a thread" in in_thread["exception"]
    assert (uncaught["level"], uncaught["message"]) == ("CRITICAL", "uncaught RuntimeError")
    assert "RuntimeError: nothing caught this" in uncaught["exception"]
