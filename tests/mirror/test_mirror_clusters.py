"""The mirror between real clusters: a standalone broker and a 3-broker ZooKeeper
cluster, both directions, with mirror processes killed with SIGKILL mid-copy: exactly
once (transactions, the default: no duplicates for a read_committed consumer) and at
least once (exactly.once=false: at most the stated duplicates)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from pykfk.client.admin import AdminClient as PykfkAdmin
from pykfk.mirror.checkpoints import read_checkpoints
from pykfk.mirror.config import load_config
from pykfk.mirror.topics import describe_topic_configs
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
    offsets_used,
    read_partition,
    topic_partitions,
    write_config,
)

RECORDS = 200_000
PARTITIONS = 12
PROGRESS_MAX_RECORDS = 5000
CONSUME_BATCH_RECORDS = 1000
# The at-least-once statement (docs/mirror.md): per kill of one process, at most this
# many records are copied twice.
DUPLICATES_PER_KILL = PROGRESS_MAX_RECORDS + CONSUME_BATCH_RECORDS - 1


def _caught_up(source: str, target: str, topic: str, remote: str, partitions: int) -> bool:
    """Every target partition ends with the last record of its source partition."""
    if topic_partitions(target, remote) < partitions:
        return False
    return all(last_value(source, topic, p) == last_value(target, remote, p) for p in range(partitions))


def _verify_copy(source: str, target: str, topic: str, remote: str, partitions: int) -> tuple[int, int]:
    duplicates = replays = 0
    for p in range(partitions):
        check = check_copy(read_partition(source, topic, p), read_partition(target, remote, p))
        duplicates += check.duplicates
        replays = max(replays, check.replays)
    return duplicates, replays


def _fail_over(config: Path, source: str, target: str, topic: str, remote: str, partitions: int,
               group: str, reread_bound: int) -> None:
    """Commit offsets of ``group`` in the source, wait for their checkpoints, move the group
    to the target and check what it reads there: no gap, at most ``reread_bound``
    records per partition it had already consumed."""
    ends = end_offsets(source, topic, partitions)
    committed = {p: ends[p] // 2 for p in range(partitions)}
    consumer = Consumer({"bootstrap.servers": source, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in committed.items()], asynchronous=False)
    consumer.close()

    settings = load_config(str(config))

    def checkpointed() -> bool:
        found = read_checkpoints(settings.target.client("consumer"), settings.checkpoints_topic)
        return all(found.get((group, topic, p)) is not None
                   and found[(group, topic, p)].upstream_offset == o for p, o in committed.items())

    wait_until(checkpointed, 60, f"checkpoints of {group}")
    result = subprocess.run(mirror_command("failover", str(config), "--group", group, "--execute", "-o", "json"), check=False, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    applied = {row["partition"]: row["downstream_offset"] for row in json.loads(result.stdout)}
    assert set(applied) == set(committed)

    # The group, now in the target, starts from its committed (translated) offsets.
    reader = Consumer({"bootstrap.servers": target, "group.id": group, "enable.auto.commit": False,
                       "auto.offset.reset": "error"})
    positions = reader.committed([TopicPartition(remote, p) for p in range(partitions)], timeout=10)
    reader.close()
    for tp in positions:
        assert tp.offset == applied[tp.partition]
        source_records = read_partition(source, topic, tp.partition)
        index = {r.value: r.offset for r in source_records}
        read = [index[r.value] for r in read_partition(target, remote, tp.partition, start=tp.offset)]
        wanted_from = committed[tp.partition]
        assert set(range(wanted_from, len(source_records))) <= set(read), f"gap in partition {tp.partition}"
        again = sum(1 for o in read if o < wanted_from)
        assert again <= reread_bound, (tp.partition, again)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_standalone_to_cluster_exactly_once_with_two_processes_killed(standalone_factory: Any, zk_cluster: Any,
                                                         tmp_path: Path) -> None:
    source = standalone_factory("east").bootstrap
    target = zk_cluster.bootstrap
    create_topic(source, "orders", PARTITIONS, retention_ms=604800000, max_message_bytes=500000)
    config = write_config(
        tmp_path / "east-west.yaml", ("east", source), ("west", target),
        topics_regex="orders|payments.*", replication_factor=2,
        progress_max_records=PROGRESS_MAX_RECORDS, consume_batch_records=CONSUME_BATCH_RECORDS,
    )
    mirrors = [MirrorProcess(config, f"m{i}", "--set", f"group.instance.id=m{i}").start() for i in (1, 2)]
    writers = [PacedWriter(source, "orders", RECORDS // 2, PARTITIONS, name=f"w{i}", rate=6000,
                           first=i * RECORDS) for i in (0, 1)]
    try:
        for writer in writers:
            writer.start()
        # Kill each process once while the writers are still writing, and restart it.
        for mirror, copied in ((mirrors[0], RECORDS * 0.25), (mirrors[1], RECORDS * 0.5)):
            wait_until(lambda c=copied: offsets_used(target, "east.orders", PARTITIONS) >= c, 120,
                       f"{copied:.0f} records in the target")
            mirror.kill9()
            mirror.start()
            if mirror is mirrors[0]:
                # A topic created in the source during the run follows with its settings.
                create_topic(source, "payments", 2, retention_ms=3600000, segment_bytes=1048576)
                PacedWriter(source, "payments", 1000, 2, name="p").run()
        for writer in writers:
            writer.join(120)
            assert writer.error is None, writer.error
        assert any(w.is_alive() for w in writers) is False
        assert sum(end_offsets(source, "orders", PARTITIONS)) == RECORDS

        wait_until(lambda: _caught_up(source, target, "orders", "east.orders", PARTITIONS), 180,
                   "every source record in the target")
        wait_until(lambda: _caught_up(source, target, "payments", "east.payments", 2), 60,
                   "the payments topic copied")
        # Exactly once: the killed processes' open transactions were aborted by the
        # restarted ones, which resumed at the committed progress.
        duplicates, replays = _verify_copy(source, target, "orders", "east.orders", PARTITIONS)
        assert (duplicates, replays) == (0, 0)
        _verify_copy(source, target, "payments", "east.payments", 2)
        with PykfkAdmin(target) as target_admin:
            configs = describe_topic_configs(target_admin, "east.payments")
            assert configs["retention.ms"] == "3600000" and configs["segment.bytes"] == "1048576"
            assert describe_topic_configs(target_admin, "east.orders")["max.message.bytes"] == "500000"

        _fail_over(config, source, target, "orders", "east.orders", PARTITIONS, "billing",
                   reread_bound=DUPLICATES_PER_KILL)
    finally:
        for writer in writers:
            writer.join(30)
        for mirror in mirrors:
            if mirror.alive():
                assert mirror.stop() == 0, mirror.tail()
    for mirror in mirrors:
        assert "Traceback" not in mirror.tail(400), mirror.tail()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_cluster_to_standalone_follows_partitions_and_survives_kills(standalone_factory: Any, zk_cluster: Any,
                                                                   tmp_path: Path, exactly_once: bool) -> None:
    source = zk_cluster.bootstrap
    target = standalone_factory("dc1").bootstrap
    topic = f"events-{'eos' if exactly_once else 'alo'}"
    remote = f"dc2.{topic}"
    zk_cluster.create_topic(topic, 4, 3, **{"retention.ms": 86400000})
    config = write_config(tmp_path / "dc2-dc1.yaml", ("dc2", source), ("dc1", target), topics=topic,
                          progress_max_records=1000, consume_batch_records=500,
                          exactly_once=str(exactly_once).lower())
    mirror = MirrorProcess(config).start()
    try:
        first = PacedWriter(source, topic, 9000, 4, name="a", rate=4000)
        first.start()
        for copied in (2000, 5000):  # killed twice while the writer writes
            wait_until(lambda c=copied: offsets_used(target, remote, 4) >= c, 60, f"{copied} records copied")
            mirror.kill9()
            mirror.start()
        first.join(60)
        assert first.error is None
        # New partitions of the source follow to the target.
        admin = AdminClient({"bootstrap.servers": source})
        admin.create_partitions([NewPartitions(topic, 6)])[topic].result(30)
        wait_until(lambda: topic_partitions(target, remote) == 6, 60, "6 partitions in the target")
        PacedWriter(source, topic, 600, 6, name="b").run()
        wait_until(lambda: _caught_up(source, target, topic, remote, 6), 90, "the copy caught up")
        duplicates, replays = _verify_copy(source, target, topic, remote, 6)
        if exactly_once:
            assert (duplicates, replays) == (0, 0)
        else:
            assert duplicates <= 2 * (1000 + 500 - 1) and replays <= 2
        with PykfkAdmin(target) as target_admin:
            assert describe_topic_configs(target_admin, remote)["retention.ms"] == "86400000"
        _fail_over(config, source, target, topic, remote, 6, f"analytics-{topic}", reread_bound=1500)
    finally:
        if mirror.alive():
            assert mirror.stop() == 0, mirror.tail()
    assert "Traceback" not in mirror.tail(400), mirror.tail()
