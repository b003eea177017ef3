"""SIGHUP (systemctl reload) re-reads server.properties: the dynamic settings that
changed apply to the running logs at once (a shorter retention deletes old segments),
a static one is named in a warning and waits for a restart, a bad file changes nothing."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from .conftest import START_TIMEOUT_S

HOUR_MS = 3_600_000


def _write_config(path: Path, data: Path, **extra: str) -> None:
    settings = {
        "log.dirs": str(data),
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.segment.bytes": "4096",
        "log.retention.check.interval.ms": "200",
        "log.segment.delete.delay.ms": "0",
        **{key.replace("_", "."): value for key, value in extra.items()},
    }
    path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()), encoding="utf-8")


def _wait_for_log_line(broker, text: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while text not in broker.stderr:
        assert time.monotonic() < deadline, f"no {text!r} in:\n{broker.stderr}"
        time.sleep(0.05)


def _broker_setting(bootstrap: str, name: str) -> str:
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_configs([resource])[resource].result(20)[name].value


def test_a_shorter_retention_in_the_file_deletes_old_segments_after_sighup(tmp_path, service_broker):
    config = tmp_path / "server.properties"
    _write_config(config, tmp_path / "data")
    broker = service_broker([str(config)])
    bootstrap = f"127.0.0.1:{broker.wait_ready()}"
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    for _ in range(100):  # 500-byte records an hour old: about 12 segments of 4 KiB
        producer.produce("aged", b"x" * 500, timestamp=int(time.time() * 1000) - HOUR_MS)
        producer.poll(0)
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "peek"})
    try:
        def log_start() -> int:
            return consumer.get_watermark_offsets(TopicPartition("aged", 0), timeout=10)[0]

        time.sleep(1)  # retention passes run every 200 ms: the week-long default keeps all
        assert log_start() == 0

        _write_config(config, tmp_path / "data", log_retention_ms="60000")
        broker.proc.send_signal(signal.SIGHUP)
        _wait_for_log_line(broker, "log.retention.ms=60000")
        deadline = time.monotonic() + 20
        while log_start() == 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert log_start() > 0
    finally:
        consumer.close()
    assert _broker_setting(bootstrap, "log.retention.ms") == "60000"
    assert broker.stop() == 0


def test_static_changes_are_named_and_wait_for_a_restart(tmp_path, service_broker):
    config = tmp_path / "server.properties"
    _write_config(config, tmp_path / "data")
    broker = service_broker([str(config)])
    bootstrap = f"127.0.0.1:{broker.wait_ready()}"

    _write_config(config, tmp_path / "data", num_partitions="6", log_retention_bytes="1000000")
    broker.proc.send_signal(signal.SIGHUP)
    _wait_for_log_line(broker, "log.retention.bytes=1000000")
    assert "num.partitions changed in" in broker.stderr
    assert "takes effect at the next restart" in broker.stderr
    assert _broker_setting(bootstrap, "num.partitions") == "1"
    assert _broker_setting(bootstrap, "log.retention.bytes") == "1000000"

    # A bad value: nothing changes and the broker serves on.
    _write_config(config, tmp_path / "data", log_retention_bytes="lots")
    broker.proc.send_signal(signal.SIGHUP)
    _wait_for_log_line(broker, "log.retention.bytes")
    _wait_for_log_line(broker, "not reloaded")
    assert _broker_setting(bootstrap, "log.retention.bytes") == "1000000"

    config.unlink()
    broker.proc.send_signal(signal.SIGHUP)
    _wait_for_log_line(broker, "cannot read")
    assert broker.proc.poll() is None
    assert broker.stop() == 0


def test_sighup_without_a_config_file_is_logged_and_ignored(tmp_path, service_broker):
    broker = service_broker(["--override", f"log.dirs={tmp_path / 'data'}",
                             "--override", "listeners=PLAINTEXT://127.0.0.1:0"])
    broker.wait_ready()
    broker.proc.send_signal(signal.SIGHUP)
    _wait_for_log_line(broker, "no server.properties to re-read")
    assert broker.proc.poll() is None
    assert broker.stop() == 0
