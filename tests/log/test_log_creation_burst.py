"""New logs made in a burst (a topic of many partitions): the log dir is marked as the top
of unrelated directory trees for the file system's allocator, and the new logs' index
files are made only once the burst is over, then for every log."""

from __future__ import annotations

import asyncio
import fcntl
import os
import threading

import pytest

import pykfk.log.manager as manager_module
from pykfk.log import LogConfig, LogManager

FS_IOC_GETFLAGS = 0x80086601
FS_TOPDIR_FL = 0x00020000


def _manager(log_dir: str) -> LogManager:
    m = LogManager([log_dir], LogConfig(), broker_id=1, cluster_id="cluster-A")
    m.open()
    return m


def _dir_flags(path: str) -> int | None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return int.from_bytes(fcntl.ioctl(fd, FS_IOC_GETFLAGS, bytes(8))[:4], "little")
    except OSError:
        return None  # a file system without inode flags: nothing to mark
    finally:
        os.close(fd)


def test_a_log_dir_is_marked_as_the_top_of_directory_trees(tmp_path):
    log_dir = str(tmp_path / "a")
    os.makedirs(log_dir)
    supported = _dir_flags(log_dir) is not None
    m = _manager(log_dir)
    try:
        flags = _dir_flags(log_dir)
        assert (flags is not None and flags & FS_TOPDIR_FL) if supported else flags is None
        m.create_log("t", 0)  # the partition dirs themselves are plain
        assert not (_dir_flags(os.path.join(log_dir, "t-0")) or 0) & FS_TOPDIR_FL
    finally:
        m.shutdown()


def _index_files(log_dir: str, partitions: int) -> list[bool]:
    return [os.path.exists(os.path.join(log_dir, f"t-{p}", "00000000000000000000.index"))
            for p in range(partitions)]


async def test_a_burst_of_new_logs_makes_their_index_files_once_it_is_over(tmp_path, monkeypatch):
    monkeypatch.setattr(manager_module, "NEW_LOGS_QUIET_S", 0.5)
    log_dir = str(tmp_path / "a")
    m = _manager(log_dir)
    m.start()
    try:
        partitions = 40
        made = threading.Event()

        def create_all() -> None:  # off the loop, as the replica manager does
            for p in range(partitions):
                m.create_log("t", p)
            made.set()

        await asyncio.get_running_loop().run_in_executor(None, create_all)
        assert made.is_set()
        assert not any(_index_files(log_dir, partitions)), "index files made during the burst"
        for _ in range(500):
            if all(_index_files(log_dir, partitions)):
                break
            await asyncio.sleep(0.01)
        assert all(_index_files(log_dir, partitions))
        # Every new log's active segment has its indexes mapped: its appends open nothing.
        assert all(m.get_log("t", p).segments[-1].holds_fd for p in range(partitions))
        # A log made later, alone, gets its index files too.
        m.create_log("t", partitions)
        for _ in range(500):
            if all(_index_files(log_dir, partitions + 1)):
                break
            await asyncio.sleep(0.01)
        assert all(_index_files(log_dir, partitions + 1))
    finally:
        await m.aclose()


def test_without_a_loop_new_logs_use_the_managers_scheduler(tmp_path):
    log_dir = str(tmp_path / "a")
    m = _manager(log_dir)
    try:
        m.create_log("t", 0)  # not started: background work runs inline, nothing held
        assert _index_files(log_dir, 1) == [True]
    finally:
        m.shutdown()


@pytest.mark.parametrize("delay_ms", [0, 10])
def test_a_held_scheduler_passes_work_on_in_order_after_release(delay_ms):
    ran: list[int] = []

    class Target:
        def schedule(self, delay: int, fn) -> None:
            ran.append(delay)
            fn()

    held = manager_module.HeldScheduler(Target())  # type: ignore[arg-type]
    order: list[str] = []
    held.schedule(delay_ms, lambda: order.append("first"))
    held.schedule(0, lambda: order.append("second"))
    assert order == ([] if delay_ms == 0 else ["first"])
    held.release()
    held.release()
    assert order == ["first", "second"]
    held.schedule(0, lambda: order.append("after"))
    assert order == ["first", "second", "after"]
