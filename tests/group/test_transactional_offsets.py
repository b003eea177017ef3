"""Offsets committed inside a transaction (TxnOffsetCommit): invisible to OffsetFetch
until the transaction's marker commits them, dropped when it aborts, fenced for an older
producer epoch, and rebuilt from ``__consumer_offsets`` (records and markers) on reload."""

from __future__ import annotations

import time

from pykfk.errors import ErrorCode as E
from pykfk.group import GroupConfig, GroupCoordinator
from pykfk.group.storage import LogOffsetsLog
from pykfk.log import Log, LogConfig

PID = 4000


def _topics(offset: int) -> list[tuple[str, list[tuple[int, int, int, str]]]]:
    return [("in", [(0, offset, -1, "")])]


async def _coordinator(offsets_log: LogOffsetsLog) -> GroupCoordinator:
    coordinator = GroupCoordinator(GroupConfig(offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=0))
    await coordinator.start(run_retention=False)
    await coordinator.load_partition(0, offsets_log)
    return coordinator


async def _committed(coordinator: GroupCoordinator, *, require_stable: bool = False) -> tuple[int, int]:
    result = await coordinator.offset_fetch("g", [("in", [0])], require_stable=require_stable)
    row = result["topics"][0]["partitions"][0]
    return row["committed_offset"], row["error_code"]


def _log(tmp_path) -> Log:
    return Log(str(tmp_path / "__consumer_offsets-0"), LogConfig(cleanup_policy="compact"))


async def test_visible_on_commit_dropped_on_abort_and_rebuilt_on_reload(tmp_path):
    log = _log(tmp_path)
    coordinator = await _coordinator(LogOffsetsLog(log))
    result = await coordinator.txn_offset_commit("g", PID, 0, _topics(10))
    assert result["topics"][0]["partitions"][0]["error_code"] == E.NONE
    assert await _committed(coordinator) == (-1, E.NONE)
    assert await _committed(coordinator, require_stable=True) == (-1, E.UNSTABLE_OFFSET_COMMIT)
    log.append_marker(PID, 0, commit=True, coordinator_epoch=0, now_ms=int(time.time() * 1000))
    await coordinator.complete_transaction(PID, 0, commit=True)
    assert await _committed(coordinator, require_stable=True) == (10, E.NONE)

    await coordinator.txn_offset_commit("g", PID, 0, _topics(20))
    log.append_marker(PID, 0, commit=False, coordinator_epoch=0)
    await coordinator.complete_transaction(PID, 0, commit=False)
    assert await _committed(coordinator) == (10, E.NONE)
    await coordinator.txn_offset_commit("g", PID, 0, _topics(30))  # left open
    await coordinator.shutdown()

    again = await _coordinator(LogOffsetsLog(log))  # replays records and markers
    assert await _committed(again) == (10, E.NONE)
    assert await _committed(again, require_stable=True) == (10, E.UNSTABLE_OFFSET_COMMIT)
    log.append_marker(PID, 0, commit=True, coordinator_epoch=0)
    await again.complete_transaction(PID, 0, commit=True)
    assert await _committed(again) == (30, E.NONE)
    await again.shutdown()
    log.close()


async def test_an_older_producer_epoch_is_fenced(tmp_path):
    log = _log(tmp_path)
    coordinator = await _coordinator(LogOffsetsLog(log))
    await coordinator.txn_offset_commit("g", PID, 3, _topics(5))
    result = await coordinator.txn_offset_commit("g", PID, 2, _topics(6))
    assert result["topics"][0]["partitions"][0]["error_code"] == E.PRODUCER_FENCED
    await coordinator.shutdown()
    log.close()
