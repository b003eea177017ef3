"""LogManager: log dirs, meta.properties, checkpoints, clean shutdown, recovery, background
work on an event loop."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading

import pytest

from pykfk.errors import ErrorCode, KafkaError
from pykfk.log import LogConfig, LogManager
from pykfk.log.checkpoints import read_offset_checkpoint
from pykfk.log.log import Log, time_ms
from pykfk.log.manager import InconsistentBrokerMetadataError, LogDirInUseError

from .helpers import batch, read_records


def manager(dirs, config=None, **kw):
    kw.setdefault("broker_id", 1)
    kw.setdefault("cluster_id", "cluster-A")
    m = LogManager([str(d) for d in dirs], config or LogConfig(), **kw)
    m.open()
    return m


async def eventually(condition, timeout_s=10.0, interval_s=0.02):
    """Polls ``condition`` on the loop until it holds or ``timeout_s`` passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition() and loop.time() < deadline:
        await asyncio.sleep(interval_s)


def test_meta_properties_are_written_and_checked(tmp_path):
    m = manager([tmp_path / "a"])
    m.shutdown()
    text = (tmp_path / "a" / "meta.properties").read_text()
    assert "broker.id=1\n" in text and "cluster.id=cluster-A\n" in text and "version=0\n" in text
    with pytest.raises(InconsistentBrokerMetadataError, match="broker.id 1"):
        manager([tmp_path / "a"], broker_id=2)
    with pytest.raises(InconsistentBrokerMetadataError, match="cluster-A"):
        manager([tmp_path / "a"], cluster_id="cluster-B")
    m = manager([tmp_path / "a"], cluster_id=None)  # adopts the stored cluster id
    assert m.cluster_id == "cluster-A"
    m.shutdown()


def test_a_log_dir_serves_one_broker_at_a_time(tmp_path):
    m = manager([tmp_path / "a"])
    with pytest.raises(LogDirInUseError):
        manager([tmp_path / "a"])
    m.shutdown()
    manager([tmp_path / "a"]).shutdown()


def test_new_partitions_go_to_the_dir_with_fewest(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    m = manager(dirs)
    for p in range(2):
        m.create_log("pre", p)
    assert m.partition_counts() == {str(dirs[0]): 1, str(dirs[1]): 1, str(dirs[2]): 0}
    log = m.create_log("orders", 0)
    assert log.dir == str(dirs[2] / "orders-0")
    for p in range(1, 5):
        m.create_log("orders", p)
    assert sorted(m.partition_counts().values()) == [2, 2, 3]
    assert m.create_log("orders", 0) is log  # existing logs are returned, not recreated
    assert m.get_log("orders", 9) is None and len(m.logs()) == 7
    m.shutdown()


def test_dir_counts_follow_deletes_and_a_restart(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    for p in range(4):
        m.create_log("t", p)
    assert m.partition_counts() == {str(dirs[0]): 2, str(dirs[1]): 2}
    doomed = [p for p in range(4) if m.get_log("t", p).dir.startswith(str(dirs[0]))]
    for p in doomed:
        m.delete_log("t", p)
    assert m.partition_counts() == {str(dirs[0]): 0, str(dirs[1]): 2}
    assert m.create_log("u", 0).dir == str(dirs[0] / "u-0")  # the emptied dir comes first
    m.shutdown()
    again = manager(dirs)
    assert again.partition_counts() == {str(dirs[0]): 1, str(dirs[1]): 2}
    assert again.create_log("u", 1).dir == str(dirs[0] / "u-1")
    again.shutdown()


@pytest.mark.parametrize("topic", ["", "../evil", "a/b", "x" * 250, ".", "..", "sp ace"])
def test_illegal_topic_names_never_become_paths(tmp_path, topic):
    m = manager([tmp_path / "a"])
    with pytest.raises(KafkaError) as err:
        m.create_log(topic, 0)
    assert err.value.code == ErrorCode.INVALID_TOPIC_EXCEPTION
    m.shutdown()


def test_a_new_log_dir_is_not_an_unclean_shutdown(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="pykfk.log"):
        m = manager([tmp_path / "a"])
    assert "unclean" not in caplog.text and "No logs to load" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    m.shutdown()


def test_clean_shutdown_round_trip(tmp_path, caplog):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    for p in range(3):
        log = m.create_log("t", p)
        for _ in range(p + 1):
            log.append(batch(2))
    m.get_log("t", 1).advance_log_start_offset(1)
    m.shutdown()
    for d in dirs:
        assert (d / ".kafka_cleanshutdown").exists()
    points = {}
    for d in dirs:
        points.update(read_offset_checkpoint(str(d / "recovery-point-offset-checkpoint")))
    assert points == {("t", 0): 2, ("t", 1): 4, ("t", 2): 6}
    starts = read_offset_checkpoint(str(dirs[1] / "log-start-offset-checkpoint"))
    assert starts == {("t", 1): 1}
    hws = read_offset_checkpoint(str(dirs[0] / "replication-offset-checkpoint"))
    assert hws == {("t", 0): 2, ("t", 2): 6}

    with caplog.at_level(logging.INFO, logger="pykfk.log"):
        m = manager(dirs)
    assert "Recover" not in caplog.text and "after a clean shutdown" in caplog.text
    assert not any((d / ".kafka_cleanshutdown").exists() for d in dirs)  # a crash now recovers
    assert {tp: log.log_end_offset for tp, log in m.logs().items()} == {
        ("t", 0): 2, ("t", 1): 4, ("t", 2): 6}
    assert m.get_log("t", 1).log_start_offset == 1
    assert m.high_watermark_checkpoint("t", 2) == 6
    m.shutdown()


# A broker that appends through its LogManager, writes checkpoints once, appends more and
# is killed with SIGKILL.
BROKER = """
import os, signal, sys
from pykfk._core import records
from pykfk.log import LogConfig, LogManager
m = LogManager([sys.argv[1]], LogConfig(segment_bytes=400), broker_id=1)
m.open()
log = m.create_log("t", 0)
for i in range(30):
    log.append(bytearray(records.build_batch([(None, b"%d" % i, 1000 + i, [])])))
    if i == 9:
        log.flush()
        m.write_checkpoints()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_killed_broker_recovers_from_its_recovery_point(tmp_path, caplog):
    d = tmp_path / "a"
    proc = subprocess.run([sys.executable, "-c", BROKER, str(d)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert not (d / ".kafka_cleanshutdown").exists()
    assert read_offset_checkpoint(str(d / "recovery-point-offset-checkpoint")) == {("t", 0): 10}
    segment_logs = sorted((d / "t-0").glob("*.log"))
    with open(segment_logs[-1], "r+b") as f:  # tear the last batch
        f.truncate(f.seek(0, 2) - 1)
    with caplog.at_level(logging.INFO, logger="pykfk.log"):
        m = manager([d], cluster_id=None)
    assert "after an unclean shutdown" in caplog.text
    assert "Recovering" in caplog.text and "Truncated" in caplog.text
    log = m.get_log("t", 0)
    assert log.log_end_offset == 29
    assert [v for _, v in read_records(log)] == [b"%d" % i for i in range(29)]
    m.shutdown()


def test_delete_log_waits_for_the_delay_and_restarts_finish_it(tmp_path):
    d = tmp_path / "a"
    m = manager([d], LogConfig(file_delete_delay_ms=3_600_000))
    log = m.create_log("gone", 0)
    log.append(batch(3))
    region = log.read(0, 1000).file_region
    assert m.delete_log("gone", 0) and not m.delete_log("gone", 0)
    assert m.get_log("gone", 0) is None
    assert not (d / "gone-0").exists()
    (pending,) = [p for p in d.iterdir() if p.name.endswith("-delete")]
    assert len(os.pread(region.fd, region.size, region.position)) == region.size
    m.create_log("gone", 0)  # the name is free again at once
    m.write_checkpoints()
    # Stop without shutdown, as a crash would: the pending delete is left behind and the
    # process exit drops the dir lock.
    m._release_locks()
    assert pending.exists()
    m2 = manager([d])
    assert not pending.exists()
    assert m2.get_log("gone", 0).log_end_offset == 0
    m2.shutdown()


def test_flush_scheduler_follows_config_changes_and_new_logs(tmp_path):
    # flush.ms of a minute, asked a minute later: due for the scheduler, not at the appends.
    m = manager([tmp_path / "a"], config_for=lambda topic: LogConfig(flush_interval_ms=60_000) if topic == "timed" else LogConfig())
    later = time_ms() + 120_000
    plain = m.create_log("plain", 0)
    plain.append(batch(2))
    assert m.flush_dirty(later) == 0 and plain.recovery_point == 0  # no flush.ms: never asked
    plain.update_config(LogConfig(flush_interval_ms=60_000))
    assert m.flush_dirty(later) == 1 and plain.recovery_point == 2
    timed = m.create_log("timed", 0)
    timed.append(batch(3))
    plain.append(batch(1))
    assert m.flush_dirty(later) == 2 and (plain.recovery_point, timed.recovery_point) == (3, 3)
    plain.update_config(LogConfig())
    plain.append(batch(1))
    m.delete_log("timed", 0)
    assert m.flush_dirty(later) == 0 and plain.recovery_point == 3
    m.shutdown()


def test_an_append_due_for_flush_ms_waits_for_its_fsync(tmp_path):
    m = manager([tmp_path / "a"], config_for=lambda topic: LogConfig(flush_interval_ms=0))
    log = m.create_log("t", 0)
    info = log.append(batch(2))  # flushed by the append (no loop yet: inline)
    assert log.recovery_point == 2 and (info.flushed is None or info.flushed.done())
    m.shutdown()


def test_writes_in_a_log_dir_reach_only_the_partitions_current_log(tmp_path):
    m = manager([tmp_path / "a"], LogConfig(file_delete_delay_ms=3_600_000))
    old = m.create_log("t", 0)
    path = old.dir
    written = []
    assert m.in_current_log_dir(old, written.append) and written == [path]
    m.delete_log("t", 0)
    assert not m.in_current_log_dir(old, written.append)
    new = m.create_log("t", 0)  # the same directory name, another log
    assert new.dir == path
    assert not m.in_current_log_dir(old, written.append) and written == [path]
    m.shutdown()


def test_checkpoints_are_rewritten_only_when_an_offset_changed(tmp_path, monkeypatch):
    m = manager([tmp_path / "a"], LogConfig(file_delete_delay_ms=0))
    log = m.create_log("t", 0)
    log.append(batch(2))
    m.write_checkpoints()
    files = {name: tmp_path / "a" / name for name in
             ("recovery-point-offset-checkpoint", "log-start-offset-checkpoint", "replication-offset-checkpoint")}
    inodes = {name: path.stat().st_ino for name, path in files.items()}
    reads = []
    original = Log.checkpointed_offsets
    monkeypatch.setattr(Log, "checkpointed_offsets", lambda self: reads.append(self) or original(self))
    m.write_checkpoints()
    assert reads == []  # no offset moved: no log read, no file rewritten
    assert {name: path.stat().st_ino for name, path in files.items()} == inodes

    def checkpointed() -> tuple[int, int, int]:
        m.write_checkpoints()
        return tuple(read_offset_checkpoint(str(path))[("t", 0)] for path in files.values())

    log.append(batch(1))
    assert checkpointed() == (0, 0, 3) and reads == [log]
    assert files["recovery-point-offset-checkpoint"].stat().st_ino == inodes["recovery-point-offset-checkpoint"]
    log.flush()
    assert checkpointed() == (3, 0, 3)
    log.high_watermark = 2  # each kind of move is seen on its own
    assert checkpointed() == (3, 0, 2)
    log.high_watermark = None
    log.advance_log_start_offset(1)
    assert checkpointed() == (3, 1, 3)
    log.truncate_to(2)
    assert checkpointed() == (2, 1, 2)
    log.roll()
    log.append(batch(1))
    log.flush()
    assert checkpointed() == (3, 1, 3)
    # Retention writes the log start checkpoint alone; the next full pass still writes
    # every file whose offsets moved since its own last write.
    log.advance_log_start_offset(3)
    m.write_log_start_offset_checkpoints()
    assert read_offset_checkpoint(str(files["log-start-offset-checkpoint"])) == {("t", 0): 3}
    assert m.run_retention() == 1  # the segment below the new start
    assert checkpointed() == (3, 3, 3)
    m.create_log("t", 1)
    m.write_checkpoints()
    assert read_offset_checkpoint(str(files["replication-offset-checkpoint"])) == {("t", 0): 3, ("t", 1): 0}
    m.shutdown()


async def test_background_retention_and_flush_run_off_the_loop(tmp_path):
    one = len(batch(1))
    config = LogConfig(segment_bytes=2 * one, retention_bytes=4 * one, retention_ms=-1,
                       file_delete_delay_ms=0, flush_interval_ms=0)
    m = manager([tmp_path / "a"], config, retention_check_interval_ms=20,
                flush_check_interval_ms=20, checkpoint_interval_ms=20)
    log = m.create_log("t", 0)
    flush_threads = []
    original_flush = log.flush

    def recording_flush(*args):
        flush_threads.append(threading.current_thread().name)
        return original_flush(*args)

    log.flush = recording_flush
    m.start()
    for _ in range(10):
        log.append(batch(1))
    loop_thread = threading.current_thread().name
    checkpoint = str(tmp_path / "a" / "recovery-point-offset-checkpoint")

    def state():
        # Three independent background passes (retention, flush, checkpoint) each get
        # there in their own time: wait for all of them, then check each.
        return ([s.base_offset for s in log.segments], log.recovery_point,
                sorted(p.name for p in (tmp_path / "a" / "t-0").glob("*.deleted")),
                read_offset_checkpoint(checkpoint))

    want = ([6, 8], 10, [], {("t", 0): 10})
    await eventually(lambda: state() == want)
    assert state() == want
    assert flush_threads and loop_thread not in flush_threads
    assert all(name.startswith(("pykfk-log", "pykfk-flush")) for name in flush_threads)
    await m.aclose()
    assert (tmp_path / "a" / ".kafka_cleanshutdown").exists()


async def test_flush_messages_through_the_manager_runs_on_its_worker(tmp_path):
    m = manager([tmp_path / "a"], LogConfig(flush_interval_messages=5))
    m.start()
    log = m.create_log("t", 0)
    log.append(batch(5))
    for _ in range(200):
        if log.recovery_point == 5:
            break
        await asyncio.sleep(0.01)
    assert log.recovery_point == 5
    await m.aclose()


def test_a_dir_that_cannot_be_loaded_at_start_keeps_its_partitions_until_it_comes_back(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    first = manager([a, b])
    kept = first.create_log("kept", 0)  # the first dir has the fewest partitions: a
    moved = first.create_log("moved", 0)  # then b
    assert moved.dir.startswith(str(b))
    moved.append(batch(3))
    first.shutdown()
    (b / "meta.properties").unlink()
    (b / "meta.properties").mkdir()  # unreadable: loading b fails
    m = manager([a, b])
    assert m.offline_dirs() == [str(b)] and m.get_log("moved", 0) is None
    with pytest.raises(KafkaError) as stranded:
        m.create_log("moved", 0)  # not made empty elsewhere while its data waits in b
    assert stranded.value.code == ErrorCode.KAFKA_STORAGE_ERROR and str(b) in stranded.value.message
    assert m.create_log("new", 0).dir.startswith(str(a))  # new partitions go to the online dir
    assert not m.probe_offline_dir(str(b))
    (b / "meta.properties").rmdir()
    (b / "meta.properties").write_bytes((a / "meta.properties").read_bytes())
    assert m.probe_offline_dir(str(b)) and m.offline_dirs() == []
    assert [v for _o, v in read_records(m.get_log("moved", 0))] == [b"v-0", b"v-1", b"v-2"]
    assert m.get_log("kept", 0) is not None and kept.dir.startswith(str(a))
    m.shutdown()
