"""One exactly-once mirror through everything that can happen to it, between two
standalone brokers: killed with SIGKILL twice while records flow, then the target broker
stopped for 30 s and started again on the same port while the same process runs, then
the source broker for 10 s. Then:

- the target, read with read_committed, holds every source record once, in order;
- the process resumed by itself, saying so in a handful of lines (no client log flood,
  no traceback);
- a consumer group that committed on the source, moved to the target with the mirror's
  checkpoints, reads no gap and reads again at most offset.lag.max records per partition,
  also in a partition whose offset mapping was made by the first, killed, process;
- ``pykfk audit`` finds the mirror's counts equal to the producer's in every window,
  although two processes died between committing records and publishing their counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from pykfk.mirror.checkpoints import read_checkpoints
from pykfk.mirror.config import load_config
from pykfk.testing import wait_until
from tests.mirror.helpers import (
    ROOT,
    MirrorProcess,
    PacedWriter,
    check_copy,
    create_topic,
    end_offsets,
    last_value,
    mirror_command,
    read_partition,
    write_config,
)

PARTITIONS = 4
OFFSET_LAG_MAX = 100
AUDIT_WINDOW_MS = 1000
OUTAGE_S = 30
SOURCE_OUTAGE_S = 10
# Lines other than the progress line the mirror may print from the target's stop until
# it copies again: its state changes and a few transactions aborted by the restart.
STATUS_LINES_MAX = 10


def _caught_up(source: str, target: str) -> bool:
    return all(last_value(source, "trades", p) == last_value(target, "a.trades", p) for p in range(PARTITIONS))


def _committed(target: str) -> list[int]:
    """Each target partition's last stable offset: how far committed transactions reach."""
    consumer = Consumer({"bootstrap.servers": target, "group.id": "test-ends", "isolation.level": "read_committed"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition("a.trades", p), timeout=10)[1]
                for p in range(PARTITIONS)]
    except Exception:  # noqa: BLE001 - the topic may not exist yet
        return [0] * PARTITIONS
    finally:
        consumer.close()


def _lines_since(mirror: MirrorProcess, offset: int) -> list[str]:
    with open(mirror.log, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace").splitlines()


def _fail_over(config: Path, source: str, target: str, committed: dict[int, int]) -> None:
    """Commit ``committed`` for group billing in the source, move the group with its
    checkpoints and read what it gets in the target."""
    group = "billing"
    consumer = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition("trades", p, o) for p, o in committed.items()], asynchronous=False)
    consumer.close()
    settings = load_config(str(config))

    def checkpointed() -> bool:
        found = read_checkpoints(settings.target.client("consumer"), settings.checkpoints_topic)
        return all((group, "trades", p) in found and found[(group, "trades", p)].upstream_offset == o
                   for p, o in committed.items())

    wait_until(checkpointed, 30, "checkpoints of every partition")
    result = subprocess.run(mirror_command("failover", str(config), "--group", group, "--execute", "-o", "json"), check=False, capture_output=True, text=True, timeout=60,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    applied = {row["partition"]: row["downstream_offset"] for row in json.loads(result.stdout)}
    for p, upstream in committed.items():
        index = {r.value: r.offset for r in read_partition(source, "trades", p)}
        read = [index[r.value] for r in read_partition(target, "a.trades", p, start=applied[p])]
        assert set(range(upstream, len(index))) <= set(read), f"gap in partition {p}"
        again = sum(1 for offset in read if offset < upstream)
        assert again <= OFFSET_LAG_MAX, (p, upstream, again)


def _producer_counts(source: str, audit_bootstrap: str) -> None:
    """The producer tier's audit counts: every record the source acknowledged."""
    from pykfk.audit import AuditEmitter

    emitter = AuditEmitter(audit_bootstrap, "producer", window_ms=AUDIT_WINDOW_MS, background=False)
    for p in range(PARTITIONS):
        emitter.count_timestamps("trades", [r.timestamp for r in read_partition(source, "trades", p)])
    emitter.close()


def _audit(bootstrap: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-c", "from pykfk.cli.main import main; main()", "audit",
                           "--bootstrap-server", bootstrap, "--settle", "0", "--tier", "mirror", "-o", "json"],
                          check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip().startswith("{") else {"err": done.stderr}


@pytest.mark.timeout(240)
def test_killed_twice_and_target_down_for_30_s(standalone_factory: Any, tmp_path: Path) -> None:
    source_broker, target_broker = standalone_factory("a"), standalone_factory("b")
    source, target = source_broker.bootstrap, target_broker.bootstrap
    create_topic(source, "trades", PARTITIONS)
    config = write_config(tmp_path / "a-b.yaml", ("a", source), ("b", target), topics="trades",
                          offset_lag_max=OFFSET_LAG_MAX, progress_max_records=3000,
                          audit_bootstrap_servers=target, audit_window_ms=AUDIT_WINDOW_MS,
                          **{"target.reconnect.backoff.max.ms": 1000})
    mirror = MirrorProcess(config, "m", "--set", "group.instance.id=m1").start()
    writer = PacedWriter(source, "trades", 16_000, PARTITIONS, rate=2500)
    writer.start()
    try:
        # Killed twice while the writer writes, each time after it committed copies of
        # every partition (the first kill: partition 0's first offsets among them).
        for copied in (2500, 8000):
            wait_until(lambda c=copied: min(_committed(target)) >= c // PARTITIONS, 60, f"{copied} committed")
            mirror.kill9()
            mirror.start()
        writer.join(60)
        assert writer.error is None
        wait_until(lambda: _caught_up(source, target), 60, "the copy caught up after the kills")

        # The target goes away for 30 s while records keep coming.
        outage_from = mirror.log.stat().st_size
        target_broker.stop()
        more = PacedWriter(source, "trades", 3000, PARTITIONS, name="during", rate=1000)
        more.start()
        time.sleep(OUTAGE_S)
        target_broker.start()
        more.join(30)
        assert more.error is None
        wait_until(lambda: _caught_up(source, target), 60, "the copy caught up after the outage")
        assert mirror.alive() and mirror.starts == 3, mirror.tail()
        said = [line for line in _lines_since(mirror, outage_from) if " records (" not in line]
        assert sum("unreachable" in line for line in said) == 1, said
        assert any("reachable again" in line for line in said), said
        assert len(said) <= STATUS_LINES_MAX, said

        # The source goes away for 10 s.
        outage_from = mirror.log.stat().st_size
        source_broker.stop()
        time.sleep(SOURCE_OUTAGE_S)
        source_broker.start()
        PacedWriter(source, "trades", 400, PARTITIONS, name="later").run()
        wait_until(lambda: _caught_up(source, target), 60, "the copy caught up after the source's outage")
        assert mirror.alive() and mirror.starts == 3, mirror.tail()
        said = [line for line in _lines_since(mirror, outage_from) if " records (" not in line]
        assert sum("source" in line and "unreachable" in line for line in said) == 1, said
        assert any("source" in line and "reachable again" in line for line in said), said
        assert len(said) <= STATUS_LINES_MAX, said

        for p in range(PARTITIONS):
            check = check_copy(read_partition(source, "trades", p), read_partition(target, "a.trades", p))
            assert (check.duplicates, check.replays) == (0, 0), (p, check)

        ends = end_offsets(source, "trades", PARTITIONS)
        # Partition 0's offset 10 was mapped by the first process, before the first kill.
        _fail_over(config, source, target, {0: 10, 1: ends[1] // 3, 2: ends[2] // 2, 3: ends[3] - 7})

        _producer_counts(source, target)
        verdict: dict[str, Any] = {}

        def complete() -> bool:
            nonlocal verdict
            code, verdict = _audit(target)
            summary = verdict.get("summary", {})
            return code == 0 and summary.get("windows", 0) > 0 and summary["windows_complete"] == summary["windows"]

        wait_until(complete, 30, "the audit to find every window complete", interval=1)
        assert verdict["summary"]["missing"] == verdict["summary"]["duplicates"] == 0, verdict["summary"]
    finally:
        writer.join(10)
        if mirror.alive():
            assert mirror.stop() == 0, mirror.tail()
    assert "Traceback" not in mirror.log.read_text(errors="replace"), mirror.tail()
