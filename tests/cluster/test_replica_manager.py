"""ReplicaManager and Partition on an injected clock: the high watermark, acks=all,
ISR shrink and expand, leader epochs and fencing, a cluster of one. Real logs in a temp
dir, an in-memory store (tests/cluster/fakes.py), time moved by a ManualClock."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
import uuid
import weakref
from typing import Any

import pytest

from pykfk._core.records import build_batch
from pykfk.clock import ManualClock
from pykfk.cluster import leader_epoch
from pykfk.cluster.embedded import EmbeddedMetadataStore
from pykfk.cluster.leader_epoch import LeaderEpochCache
from pykfk.cluster.metadata import BrokerInfo
from pykfk.cluster.replica import CREATE_CHUNK, REFREEZE_DELAY_S, ReplicaManager, ReplicaSettings
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log import LogConfig, LogManager
from pykfk.log.partition_metadata import read_partition_metadata

from .fakes import FakeStore

pytestmark = pytest.mark.timeout(30)

ME, F1, F2 = 0, 1, 2
LAG_MS = 1_000


def batch(count: int = 1) -> bytearray:
    return bytearray(build_batch([(None, b"v%d" % i, 1_700_000_000_000, []) for i in range(count)]))


class Harness:
    def __init__(self, tmp_path: Any, store: Any, clock: ManualClock):
        self.clock = clock
        self.store = store
        self.log_manager = LogManager([str(tmp_path / "logs")], LogConfig(), broker_id=ME)
        self.log_manager.open()
        self.manager = ReplicaManager(
            ME, store, self.log_manager, ReplicaSettings(replica_lag_time_max_ms=LAG_MS),
            log_config_for=lambda topic: LogConfig(), clock=clock)
        # What ClusterNode does: store events reach the replica manager.
        store.add_listener(lambda kind, key: self.manager.apply_state(*key) if kind == "partition" else None)

    def partition(self, topic: str = "t", index: int = 0) -> Any:
        return self.manager.partitions[(topic, index)]

    async def close(self) -> None:
        await self.manager.shutdown()
        self.log_manager.shutdown()


@pytest.fixture
async def cluster(tmp_path):
    """Broker 0 leads t-0, replicated to 1 and 2, all in sync, at leader epoch 5."""
    store = FakeStore(ME, [ME, F1, F2])
    store.add_topic("t", {0: [ME, F1, F2]})
    harness = Harness(tmp_path, store, ManualClock())
    harness.manager.start()
    store.set_state("t", 0, ME, 5, [ME, F1, F2])
    await harness.manager.leaders_settled()  # its leader epoch file is written off the loop
    yield harness
    await harness.close()


async def test_high_watermark_is_the_lowest_isr_position_and_acks_all_waits_for_it(cluster):
    leader = cluster.partition()
    info, wait = leader.append_records(batch(3), -1, 5_000)
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert wait is not None and leader.high_watermark == 0
    pending = asyncio.create_task(wait)
    leader.follower_fetched(F1, 3)
    await cluster.clock.settle()
    assert leader.high_watermark == 0 and not pending.done()
    leader.follower_fetched(F2, 2)  # one record short
    assert leader.high_watermark == 2
    leader.follower_fetched(F2, 3)
    assert leader.high_watermark == 3
    assert await pending == ErrorCode.NONE
    # acks=1 answers at once, whatever the followers do.
    info, wait = leader.append_records(batch(), 1, 5_000)
    assert wait is None and info.first_offset == 3 and leader.high_watermark == 3


async def test_acks_all_times_out_on_the_clock(cluster):
    _info, wait = cluster.partition().append_records(batch(), -1, 500)
    pending = asyncio.create_task(wait)
    await cluster.clock.tick(499)
    assert not pending.done()
    await cluster.clock.tick(1)
    assert await pending == ErrorCode.REQUEST_TIMED_OUT


async def test_a_lagging_follower_leaves_the_isr_and_the_high_watermark_moves_on(cluster):
    leader = cluster.partition()
    _info, wait = leader.append_records(batch(), -1, 60_000)
    pending = asyncio.create_task(wait)
    for _ in range(4):  # F1 keeps up; F2 is silent
        await cluster.clock.tick(LAG_MS // 4)
        leader.follower_fetched(F1, 1)
    assert leader.isr == {ME, F1, F2}  # not more than replica.lag.time.max.ms yet
    await cluster.clock.tick(LAG_MS // 2)  # past it: the periodic check shrinks the ISR
    assert cluster.store.isr_writes == [("t", 0, (ME, F1))]
    assert leader.isr == {ME, F1}
    assert leader.high_watermark == 1
    assert await pending == ErrorCode.NONE


async def test_a_follower_that_caught_up_rejoins_the_isr(cluster):
    leader = cluster.partition()
    cluster.store.set_state("t", 0, ME, 5, [ME, F1])  # F2 was out
    await cluster.manager.leaders_settled()
    leader.append_records(batch(2), 1, 1_000)
    leader.follower_fetched(F1, 2)
    assert leader.high_watermark == 2
    leader.follower_fetched(F2, 1)  # behind the high watermark: stays out
    await cluster.clock.settle()
    assert leader.isr == {ME, F1}
    leader.follower_fetched(F2, 2)
    await cluster.clock.settle()
    assert cluster.store.isr_writes == [("t", 0, (ME, F1, F2))]
    assert leader.isr == {ME, F1, F2}


async def test_min_insync_replicas_refuses_acks_all_when_the_isr_is_too_small(tmp_path):
    store = FakeStore(ME, [ME, F1, F2])
    store.add_topic("t", {0: [ME, F1, F2]}, {"min.insync.replicas": "3"})
    harness = Harness(tmp_path, store, ManualClock())
    try:
        store.set_state("t", 0, ME, 1, [ME, F1])
        await harness.manager.leaders_settled()
        leader = harness.partition()
        with pytest.raises(KafkaError) as refused:
            leader.append_records(batch(), -1, 1_000)
        assert refused.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        info, wait = leader.append_records(batch(), 1, 1_000)  # acks=1 is not held back
        assert wait is None and info.first_offset == 0
    finally:
        await harness.close()


async def test_leader_epochs_fence_stale_and_future_fetchers(cluster):
    manager = cluster.manager
    cluster.partition().append_records(batch(), 1, 1_000)
    assert manager.log_for_fetch("t", 0, -1, 0, 5)[1] == 0  # consumers read to the high watermark
    with pytest.raises(KafkaError) as stale:
        manager.log_for_fetch("t", 0, -1, 0, 4)
    assert stale.value.code == ErrorCode.FENCED_LEADER_EPOCH
    with pytest.raises(KafkaError) as future:
        manager.log_for_fetch("t", 0, -1, 0, 6)
    assert future.value.code == ErrorCode.UNKNOWN_LEADER_EPOCH
    assert manager.end_offset_for_epoch("t", 0, 5, 5) == (5, 1)
    # A follower reads to the log end offset.
    assert manager.log_for_fetch("t", 0, F1, 0, 5)[1] == 1


async def test_an_older_state_never_replaces_a_newer_one(cluster):
    cluster.store.set_state("t", 0, ME, 7, [ME, F1])
    cluster.store.set_state("t", 0, F1, 6, [F1])  # delayed write of a deposed controller
    await cluster.manager.leaders_settled()
    leader = cluster.partition()
    assert (leader.role, leader.leader_epoch, leader.isr) == ("leader", 7, {ME, F1})


async def test_losing_leadership_fails_acks_all_waiters_and_new_appends(cluster):
    leader = cluster.partition()
    _info, wait = leader.append_records(batch(), -1, 60_000)
    pending = asyncio.create_task(wait)
    await cluster.clock.settle()
    cluster.store.set_state("t", 0, F1, 6, [F1, F2])
    assert await pending == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.role == "follower" and leader.leader_id == F1
    with pytest.raises(KafkaError) as refused:
        cluster.manager.append_records("t", 0, batch(), 1, 1_000)
    assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # Its high watermark no longer follows its own log end offset.
    leader.log.append(batch(), assign_offsets=True)
    assert leader.high_watermark == 0


async def test_a_cluster_of_one_leads_everything_and_acks_all_never_waits(tmp_path):
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(ME, "127.0.0.1", 9092))
    harness = Harness(tmp_path, store, ManualClock())
    store.add_listener(lambda kind, key: harness.manager.apply_topic(key, range(4)) if kind == "topic" else None)
    try:
        await store.create_topic("solo", 4, 1, {})
        manager = harness.manager
        await manager.created("solo")
        assert {p.role for p in manager.partitions.values()} == {"leader"}
        leader = harness.partition("solo", 2)
        assert (leader.leader_epoch, leader.isr) == (0, {ME})
        _info, wait = leader.append_records(batch(2), -1, 1_000)
        assert wait is None and leader.high_watermark == 2 == leader.log.log_end_offset
        with pytest.raises(KafkaError) as unknown:
            manager.append_records("nope", 0, batch(), 1, 1_000)
        assert unknown.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await store.delete_topic("solo")
        assert not manager.partitions and harness.log_manager.get_log("solo", 2) is None
    finally:
        await harness.close()


def _cluster_of_one(tmp_path: Any) -> tuple[EmbeddedMetadataStore, Harness]:
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(ME, "127.0.0.1", 9092))
    harness = Harness(tmp_path, store, ManualClock())

    def on_change(kind: str, key: Any) -> None:
        if kind == "topic":
            info = store.get_topic(key)
            harness.manager.apply_topic(key, range(info.partitions if info else 0))

    store.add_listener(on_change)
    return store, harness


async def test_many_new_partitions_are_created_in_the_background_in_chunks(tmp_path):
    """Beyond CREATE_CHUNK new partitions, the loop keeps turning while their files are
    made, and created() returns once every partition leads with its epoch on file."""
    store, harness = _cluster_of_one(tmp_path)
    manager = harness.manager
    count = 3 * CREATE_CHUNK + 7
    turns = 0

    async def other_client() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other_client())
    try:
        await store.create_topic("wide", count, 1, {})
        assert len(manager.partitions) < count     # still being made
        await manager.created("wide")
        assert turns > count // CREATE_CHUNK       # the loop ran between chunks
        assert len(manager.partitions) == count
        assert {p.role for p in manager.partitions.values()} == {"leader"}
        last = harness.partition("wide", count - 1)
        assert LeaderEpochCache(last.log.dir).entries == [(0, 0)]
        # The topic id files follow the creation (as Kafka writes them from its scheduler).
        topic_id = uuid.UUID(hex=store.get_topic("wide").topic_id)
        for _ in range(500):
            if all(read_partition_metadata(p.log.dir) == topic_id for p in manager.partitions.values()):
                break
            await asyncio.sleep(0.01)
        # The segment's index files are made by the log's file worker, maybe not yet.
        files = set(os.listdir(last.log.dir))
        assert files - {"00000000000000000000.index", "00000000000000000000.timeindex"} == {
            "00000000000000000000.log", "leader-epoch-checkpoint", "partition.metadata"}
        assert {read_partition_metadata(p.log.dir) for p in manager.partitions.values()} == {topic_id}
        info, wait = last.append_records(batch(2), -1, 1_000)
        assert wait is None and info.last_offset == 1
    finally:
        ticker.cancel()
        await harness.close()


class _Cycle:
    def __init__(self) -> None:
        self.me = self


async def test_a_bulk_creation_logs_one_line_and_keeps_its_replicas_out_of_collections(tmp_path, caplog):
    """10,000 INFO lines, and full collections walking every new replica again, paused
    the loop for tens of ms during a creation: one line per topic, and the new state
    frozen out of the collector until partitions are deleted."""
    store, harness = _cluster_of_one(tmp_path)
    count = 2 * CREATE_CHUNK + 3
    gc.unfreeze()
    try:
        with caplog.at_level(logging.INFO, logger="pykfk.cluster"):
            await store.create_topic("wide", count, 1, {})
            await harness.manager.created("wide")
        lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("wide")]
        assert lines == [f"wide: {count} new partitions, this broker leading {count} of them"]
        assert gc.get_freeze_count() > 0
        garbage = _Cycle()  # garbage only the collector can free, frozen as a deleted replica would be
        left = weakref.ref(garbage)
        gc.freeze()
        del garbage
        await store.delete_topic("wide")
        harness.manager.apply_topic("wide", range(count))  # as ClusterNode does for a deleted topic
        assert not harness.manager.partitions
        assert gc.get_freeze_count() == 0  # a deleted partition's objects can be collected
        await asyncio.sleep(REFREEZE_DELAY_S + 0.5)  # then one full collection, and the rest frozen again
        assert left() is None and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        await harness.close()


async def test_a_topic_deleted_during_background_creation_leaves_no_logs(tmp_path):
    store, harness = _cluster_of_one(tmp_path)
    try:
        await store.create_topic("brief", 2 * CREATE_CHUNK, 1, {})
        await store.delete_topic("brief")
        await harness.manager.created("brief")
        assert not harness.manager.partitions
        assert not [key for key in harness.log_manager.logs() if key[0] == "brief"]
    finally:
        await harness.close()


async def test_a_new_leader_takes_appends_only_once_its_epoch_is_on_file(cluster):
    """The leader epoch file is written and synced by the writer thread, off the loop;
    until it holds the new epoch the partition takes no append (a record of an epoch
    the file does not know could outlive a crash), then it leads at that epoch."""
    leader = cluster.partition()
    leader.append_records(batch(2), 1, 1_000)
    cluster.store.set_state("t", 0, F1, 6, [F1, ME])
    await cluster.manager.leaders_settled()
    gate = threading.Event()
    held = leader_epoch._WRITER.submit(gate.wait, 10)  # the writer thread is busy
    try:
        cluster.store.set_state("t", 0, ME, 7, [ME, F1])
        await cluster.clock.settle()
        with pytest.raises(KafkaError) as refused:
            cluster.manager.append_records("t", 0, batch(), 1, 1_000)
        assert refused.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert LeaderEpochCache(leader.log.dir).entries == [(5, 0)]
        # Answered from memory meanwhile, as Kafka's cache is.
        assert leader.epochs.entries == [(5, 0), (7, 2)]
    finally:
        gate.set()
    held.result(10)
    await cluster.manager.leaders_settled()
    assert (leader.role, leader.leader_epoch) == ("leader", 7)
    assert LeaderEpochCache(leader.log.dir).entries == [(5, 0), (7, 2)]
    info, _wait = cluster.manager.append_records("t", 0, batch(), 1, 1_000)
    assert info.first_offset == 2


async def test_a_leadership_superseded_while_its_epoch_is_written_is_not_taken(cluster):
    leader = cluster.partition()
    cluster.store.set_state("t", 0, F1, 6, [F1, ME])
    await cluster.manager.leaders_settled()
    gate = threading.Event()
    held = leader_epoch._WRITER.submit(gate.wait, 10)
    try:
        cluster.store.set_state("t", 0, ME, 7, [ME, F1])
        cluster.store.set_state("t", 0, F2, 8, [F2, ME])  # moved on before the write ended
    finally:
        gate.set()
    held.result(10)
    await cluster.manager.leaders_settled()
    assert (leader.role, leader.leader_id, leader.leader_epoch) == ("follower", F2, 8)
    assert LeaderEpochCache(leader.log.dir).entries == [(7, 0)]  # epoch 5 held no record


async def test_losing_leadership_wakes_parked_consumer_and_follower_fetches(cluster):
    """A long-poll fetch parked on a partition whose leadership moves away re-reads it at
    once (and answers NOT_LEADER_OR_FOLLOWER) instead of waiting out its max_wait_ms."""
    cluster.partition()
    manager = cluster.manager
    consumer = manager.fetch_waiters(-1).park([("t", 0)])
    follower = manager.fetch_waiters(F1).park([("t", 0)])
    try:
        waiting = asyncio.gather(consumer.wait(60), follower.wait(60))
        await asyncio.sleep(0)
        cluster.store.set_state("t", 0, F1, 6, [F1, F2])
        await asyncio.wait_for(waiting, 5)
        assert consumer.take() == {("t", 0)} and follower.take() == {("t", 0)}
    finally:
        consumer.close()
        follower.close()
