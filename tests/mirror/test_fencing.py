"""Exactly once with a zombie: a mirror process paused (SIGSTOP) mid-copy loses its
partitions to another process, which fences its transactional ids; resumed, the paused
process cannot commit what it had sent, and the target read with read_committed holds
every record once."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from pykfk.testing import wait_until
from tests.mirror.helpers import (
    MirrorProcess,
    PacedWriter,
    check_copy,
    create_topic,
    last_value,
    offsets_used,
    read_partition,
    write_config,
)

PARTITIONS = 3
RECORDS = 16_000
# Long transactions (records flow at 2000/s), so the pause lands inside one.
PROGRESS_INTERVAL_MS = 3000


def _open_transaction(bootstrap: str, topic: str) -> bool:
    """Does a partition hold records of a transaction still open (its high watermark,
    read_uncommitted, beyond its last stable offset, read_committed)?"""
    ends = {}
    for isolation in ("read_uncommitted", "read_committed"):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-ends", "isolation.level": isolation})
        try:
            ends[isolation] = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                               for p in range(PARTITIONS)]
        finally:
            consumer.close()
    return any(high > stable for high, stable in zip(ends["read_uncommitted"], ends["read_committed"]))


def _pause_inside_a_transaction(mirror: MirrorProcess, target: str) -> None:
    """SIGSTOP the mirror while it has records in an open transaction (checked once it
    is stopped; a commit can slip in between the look and the signal, then again)."""
    assert mirror.proc is not None
    for _ in range(5):
        wait_until(lambda: _open_transaction(target, "a.trades"), 30, "an open transaction", interval=0.02)
        os.kill(mirror.proc.pid, signal.SIGSTOP)
        if _open_transaction(target, "a.trades"):
            return
        os.kill(mirror.proc.pid, signal.SIGCONT)
    raise AssertionError("never paused inside a transaction")


@pytest.mark.timeout(180)
def test_a_paused_process_is_fenced_and_leaves_no_duplicates(standalone_factory: Any, tmp_path: Path) -> None:
    source, target = standalone_factory("a").bootstrap, standalone_factory("b").bootstrap
    create_topic(source, "trades", PARTITIONS)
    config = write_config(tmp_path / "a-b.yaml", ("a", source), ("b", target), topics="trades",
                          progress_interval_ms=PROGRESS_INTERVAL_MS, progress_max_records=RECORDS)
    zombie = MirrorProcess(config, "zombie").start()
    successor = MirrorProcess(config, "successor")
    writer = PacedWriter(source, "trades", RECORDS, PARTITIONS, rate=2000)
    writer.start()
    try:
        wait_until(lambda: offsets_used(target, "a.trades", PARTITIONS) >= 2000, 60, "a first commit")
        _pause_inside_a_transaction(zombie, target)
        successor.start()
        # Its session expires (6 s), the successor takes every partition over and copies on.
        wait_until(lambda: successor.assigned_times() >= 1 and offsets_used(target, "a.trades", PARTITIONS) >= 8000,
                   60, "the successor copying")
        assert zombie.proc is not None
        os.kill(zombie.proc.pid, signal.SIGCONT)
        # Resumed, it cannot commit the transaction it had open: it stops.
        assert zombie.proc.wait(60) == 1, zombie.tail()
        assert "another process took it over (fenced)" in zombie.tail(400), zombie.tail()
        writer.join(60)
        assert writer.error is None
        wait_until(lambda: all(last_value(source, "trades", p) == last_value(target, "a.trades", p)
                               for p in range(PARTITIONS)), 90, "the copy caught up")
        for p in range(PARTITIONS):
            check = check_copy(read_partition(source, "trades", p), read_partition(target, "a.trades", p))
            assert (check.duplicates, check.replays) == (0, 0), (p, check)
    finally:
        if zombie.alive() and zombie.proc is not None:
            os.kill(zombie.proc.pid, signal.SIGCONT)
            zombie.stop()
        if successor.alive():
            assert successor.stop() == 0, successor.tail()
