"""Committed offsets and group metadata in a real ``__consumer_offsets`` partition log on
disk: written as v2 batches with Kafka's key/value layouts, reloaded after a restart."""

from __future__ import annotations

import os
import struct

from pykfk._core import records as records_module
from pykfk.errors import ErrorCode as E
from pykfk.group.coordinator import GroupConfig, GroupCoordinator
from pykfk.group.storage import LogOffsetsLog, MemoryOffsetsLog
from pykfk.log import Log, LogConfig

PARTITIONS = 3


def open_logs(root: str, config: LogConfig | None = None) -> dict[int, Log]:
    return {
        p: Log(os.path.join(root, f"__consumer_offsets-{p}"),
               config or LogConfig(cleanup_policy="compact"))
        for p in range(PARTITIONS)
    }


async def start_coordinator(logs: dict[int, Log]) -> GroupCoordinator:
    coordinator = GroupCoordinator(GroupConfig(
        group_min_session_timeout_ms=1, group_initial_rebalance_delay_ms=0,
        offsets_topic_num_partitions=PARTITIONS))
    await coordinator.start(run_retention=False)
    for p, log in logs.items():
        await coordinator.load_partition(p, LogOffsetsLog(log))
    return coordinator


async def join_and_sync(coordinator: GroupCoordinator, group: str) -> dict:
    join = await coordinator.join_group(group, "", "consumer", [("range", b"sub")],
                                        session_timeout_ms=10_000, client_id="c")
    member_id = join["member_id"]
    sync = await coordinator.sync_group(group, join["generation_id"], member_id,
                                        [(member_id, b"asg")])
    assert sync["error_code"] == E.NONE
    return join


def read_records(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of the log, read back through Log.read + iter_records."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        region = log.read(offset, 1 << 20).file_region
        data = os.pread(region.fd, region.size, region.position)
        batch_records = list(records_module.iter_records(data))
        out += [(r.offset, r.key, r.value) for r in batch_records if r.offset >= offset]
        offset = batch_records[-1].offset + 1
    return out


async def test_offsets_survive_a_restart_from_disk(tmp_path):
    logs = open_logs(str(tmp_path))
    coordinator = await start_coordinator(logs)
    join = await join_and_sync(coordinator, "grp")
    commit = await coordinator.offset_commit("grp", join["generation_id"], join["member_id"], [
        ("orders", [(0, 41, 2, "first"), (1, 7, -1, "")])])
    assert {p["error_code"] for t in commit["topics"] for p in t["partitions"]} == {E.NONE}
    commit = await coordinator.offset_commit("grp", join["generation_id"], join["member_id"], [
        ("orders", [(0, 42, 2, "second")])])
    await coordinator.offset_commit("standalone", -1, "", [("orders", [(5, 500, -1, "x")])])
    await coordinator.shutdown()
    for log in logs.values():
        log.close()

    reopened = open_logs(str(tmp_path))
    again = await start_coordinator(reopened)
    try:
        fetched = await again.offset_fetch("grp", None)
        got = {(t["name"], p["partition_index"]):
               (p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
               for t in fetched["topics"] for p in t["partitions"]}
        assert got == {("orders", 0): (42, 2, "second"), ("orders", 1): (7, -1, "")}
        standalone = await again.offset_fetch("standalone", [("orders", [5])])
        assert standalone["topics"][0]["partitions"][0]["committed_offset"] == 500
        # The group itself came back Stable with its member, who carries on heartbeating.
        group = again.group("grp")
        assert group.generation_id == 1 and list(group.members) == [join["member_id"]]
        assert (await again.heartbeat("grp", 1, join["member_id"]))["error_code"] == E.NONE
        described = (await again.describe_groups(["grp"]))["groups"][0]
        assert described["members"][0]["member_assignment"] == b"asg"
    finally:
        await again.shutdown()
        for log in reopened.values():
            log.close()


async def test_records_on_disk_follow_kafkas_layout(tmp_path):
    logs = open_logs(str(tmp_path))
    coordinator = await start_coordinator(logs)
    try:
        await coordinator.offset_commit("g1", -1, "", [("t", [(3, 99, 4, "md")])])
        records = read_records(logs[coordinator.partition_for("g1")])
        assert len(records) == 1
        _, key, value = records[0]
        # OffsetCommitKey v1: int16 version, string group, string topic, int32 partition.
        assert key == struct.pack(">h", 1) + b"\x00\x02g1" + b"\x00\x01t" + struct.pack(">i", 3)
        # OffsetCommitValue v3: int16 version, int64 offset, int32 leader epoch, string
        # metadata, int64 commit timestamp.
        version, offset, epoch = struct.unpack_from(">hqi", value)
        assert (version, offset, epoch) == (3, 99, 4)
        assert value[14:18] == b"\x00\x02md"
        (commit_ts,) = struct.unpack_from(">q", value, 18)
        assert commit_ts > 1_600_000_000_000 and len(value) == 26
    finally:
        await coordinator.shutdown()
        for log in logs.values():
            log.close()


async def test_deleted_group_stays_deleted_after_restart(tmp_path):
    logs = open_logs(str(tmp_path))
    coordinator = await start_coordinator(logs)
    await coordinator.offset_commit("gone", -1, "", [("t", [(0, 1, -1, "")])])
    await coordinator.offset_commit("kept", -1, "", [("t", [(0, 2, -1, "")])])
    assert (await coordinator.delete_groups(["gone"]))["results"][0]["error_code"] == E.NONE
    tombstones = [r for r in read_records(logs[coordinator.partition_for("gone")]) if r[2] is None]
    assert tombstones, "deletion writes tombstones (null values)"
    await coordinator.shutdown()
    for log in logs.values():
        log.close()

    reopened = open_logs(str(tmp_path))
    again = await start_coordinator(reopened)
    try:
        assert again.group("gone") is None
        assert again.group("kept").offsets[("t", 0)].offset == 2
    finally:
        await again.shutdown()
        for log in reopened.values():
            log.close()


async def test_load_spans_many_batches_and_segments(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=4096)
    logs = open_logs(str(tmp_path), config)
    coordinator = await start_coordinator(logs)
    for i in range(300):
        await coordinator.offset_commit("many", -1, "", [("t", [(i % 12, i, -1, "")])])
    partition = coordinator.partition_for("many")
    assert len(logs[partition].segments) > 1
    await coordinator.shutdown()
    for log in logs.values():
        log.close()

    reopened = open_logs(str(tmp_path), config)
    again = await start_coordinator(reopened)
    try:
        offsets = again.group("many").offsets
        assert {p: offsets[("t", p)].offset for p in range(12)} == {p: 288 + p for p in range(12)}
    finally:
        await again.shutdown()
        for log in reopened.values():
            log.close()


async def test_memory_log_reload_matches(tmp_path):
    # The in-memory OffsetsLog behaves like the disk one for the coordinator.
    memory = MemoryOffsetsLog()
    await memory.append([(b"k", b"v"), (b"k", None)])
    assert list(memory.read_all()) == [(b"k", b"v"), (b"k", None)]
