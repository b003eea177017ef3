"""Partition reassignment in the controller and the replica manager, on an in-memory
store and a ManualClock: a move records the union of old and new replicas, completes once
the new replicas are in sync (a leader from the new set, the removed replicas out of the
ISR and the assignment), survives a controller failover, is cancelled back to the
original replicas; bad targets are refused with Kafka's codes and change nothing. On the
replica side a leader tracks a replica added to the assignment and a broker removed from
it deletes its log; the reassignment throttle's rate."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pykfk._core.records import build_batch
from pykfk.clock import ManualClock
from pykfk.cluster.controller import Controller, ControllerSettings
from pykfk.cluster.metadata import PartitionAssignment
from pykfk.cluster.replica import ReplicaManager, ReplicaSettings
from pykfk.cluster.throttle import UNLIMITED, ByteRateThrottle
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log import LogConfig, LogManager

from .fakes import FakeStore

pytestmark = pytest.mark.timeout(30)


def leader_and_isr(store: FakeStore, topic: str = "t", partition: int = 0) -> tuple[int, int, list[int]]:
    state = store.partition_state(topic, partition)
    assert state is not None
    return state.leader, state.leader_epoch, sorted(state.isr)


def assignment(store: FakeStore, topic: str = "t", partition: int = 0) -> PartitionAssignment:
    info = store.get_topic(topic)
    assert info is not None
    return info.partition_assignment(partition, -1)


def codes(results: dict[tuple[str, int], KafkaError | None]) -> dict[tuple[str, int], ErrorCode]:
    return {key: ErrorCode.NONE if error is None else error.code for key, error in results.items()}


@pytest.fixture
async def running():
    """Broker 0 is the controller of brokers 0-4; t-0 is on [1, 2, 3], led by 1."""
    made: list[Controller] = []

    async def start(store: FakeStore | None = None) -> tuple[Controller, FakeStore, ManualClock]:
        fresh = store is None
        store = store or FakeStore(0, [0, 1, 2, 3, 4])
        clock = ManualClock()
        controller = Controller(0, store, ControllerSettings(auto_leader_rebalance=False), clock=clock)
        made.append(controller)
        controller.start()
        await clock.settle()
        if fresh:
            store.add_topic("t", {0: [1, 2, 3]})
            await clock.settle()
        return controller, store, clock

    yield start
    for controller in made:
        await controller.stop()


async def test_a_move_runs_until_the_new_replicas_are_in_sync_then_shrinks_to_the_target(running):
    controller, store, clock = await running()
    results = await controller.alter_reassignments({("t", 0): [2, 3, 4]}, True, 5)
    assert codes(results) == {("t", 0): ErrorCode.NONE}
    # The union of old and new replicas, target first; broker 4 is being added, 1 removed.
    assert assignment(store) == PartitionAssignment((2, 3, 4, 1), (4,), (1,))
    assert await controller.list_reassignments(None, 5) == {("t", 0): PartitionAssignment((2, 3, 4, 1), (4,), (1,))}
    assert leader_and_isr(store) == (1, 0, [1, 2, 3])  # nothing moves before 4 is in sync
    # The leader adds 4 to the ISR once it caught up (its own conditional update).
    store.set_state("t", 0, 1, 0, [1, 2, 3, 4])
    await clock.settle()
    # Leader 1 is leaving: 2, the first of the target set, leads at a new epoch.
    assert leader_and_isr(store) == (2, 1, [2, 3, 4])
    assert assignment(store) == PartitionAssignment((2, 3, 4))
    assert await controller.list_reassignments(None, 5) == {}


async def test_a_leader_that_stays_keeps_its_epoch_and_only_the_isr_shrinks(running):
    controller, store, clock = await running()
    await controller.alter_reassignments({("t", 0): [1, 3, 4]}, True, 5)
    store.set_state("t", 0, 1, 0, [1, 2, 3, 4])
    await clock.settle()
    assert leader_and_isr(store) == (1, 0, [1, 3, 4])
    assert assignment(store) == PartitionAssignment((1, 3, 4))


async def test_a_move_without_new_replicas_completes_at_once(running):
    controller, store, clock = await running()
    await controller.alter_reassignments({("t", 0): [3, 2]}, True, 5)
    await clock.settle()
    assert assignment(store) == PartitionAssignment((3, 2))
    assert leader_and_isr(store) == (3, 1, [2, 3])


async def test_bad_targets_get_kafkas_codes_and_change_nothing(running):
    controller, store, clock = await running()
    store.add_topic("u", {0: [1, 2], 1: [2, 3]})
    await clock.settle()
    before = (store.get_topic("t"), store.get_topic("u"), store.partition_states())
    results = await controller.alter_reassignments({
        ("t", 0): [2, 3, 99],  # broker 99 is not in the cluster
        ("u", 0): [],
        ("u", 1): [2, 2, 3],
        ("u", 5): [1, 2],
        ("nope", 0): [1, 2],
    }, True, 5)
    assert codes(results) == {
        ("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("u", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("u", 1): ErrorCode.INVALID_REPLICA_ASSIGNMENT,
        ("u", 5): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    refused = await controller.alter_reassignments({("t", 0): [2, 3, 4, 0]}, False, 5)
    assert codes(refused) == {("t", 0): ErrorCode.INVALID_REPLICATION_FACTOR}
    not_moving = await controller.alter_reassignments({("t", 0): None}, True, 5)
    assert codes(not_moving) == {("t", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
    await clock.settle()
    assert (store.get_topic("t"), store.get_topic("u"), store.partition_states()) == before
    assert store.reassignment_writes == 0


async def test_cancelling_reverts_to_the_original_replicas_and_drops_the_added_ones(running):
    controller, store, clock = await running()
    await controller.alter_reassignments({("t", 0): [2, 3, 4]}, True, 5)
    # 2 leads now and 4 joined the ISR, but 3 lags: the move cannot finish yet.
    store.set_state("t", 0, 2, 1, [2, 4])
    await clock.settle()
    assert assignment(store).reassigning
    results = await controller.alter_reassignments({("t", 0): None}, True, 5)
    assert codes(results) == {("t", 0): ErrorCode.NONE}
    # The original replicas, in the order the move kept them (Kafka's: target first).
    assert assignment(store) == PartitionAssignment((2, 3, 1))
    # 4 is no replica any more: out of the ISR at once; the leader stays.
    assert leader_and_isr(store) == (2, 1, [2])
    assert await controller.list_reassignments(None, 5) == {}


async def test_a_new_target_for_a_moving_partition_keeps_the_original_replicas(running):
    controller, store, _clock = await running()
    await controller.alter_reassignments({("t", 0): [2, 3, 4]}, True, 5)
    await controller.alter_reassignments({("t", 0): [0, 2, 3]}, True, 5)
    assert assignment(store) == PartitionAssignment((0, 2, 3, 1), (0,), (1,))


async def test_a_move_survives_a_controller_failover(running):
    first, store, _clock = await running()
    await first.alter_reassignments({("t", 0): [2, 3, 4]}, True, 5)
    await first.stop()  # resigns: the move is in the store, not in the controller
    second, _store, clock2 = await running(store)
    assert second.active and second.epoch == 2
    assert await second.list_reassignments([("t", 0), ("t", 1)], 5) == {("t", 0): PartitionAssignment((2, 3, 4, 1), (4,), (1,))}
    store.set_state("t", 0, 1, 0, [1, 2, 3, 4])
    await clock2.settle()
    assert leader_and_isr(store) == (2, 1, [2, 3, 4])
    assert assignment(store) == PartitionAssignment((2, 3, 4))


async def test_a_controller_that_is_not_active_answers_not_controller(running):
    controller, _store, _clock = await running()
    await controller.stop()
    with pytest.raises(KafkaError) as refused:
        await controller.alter_reassignments({("t", 0): [2, 3, 4]}, True, 5)
    assert refused.value.code == ErrorCode.NOT_CONTROLLER
    with pytest.raises(KafkaError):
        await controller.list_reassignments(None, 5)


# -- the replica side ----------------------------------------------------------------


class Replicas:
    """Broker ``me``'s replica manager on the fake store, with real logs."""

    def __init__(self, tmp_path: Any, store: FakeStore, me: int, **settings: Any):
        self.log_manager = LogManager([str(tmp_path / f"logs{me}")], LogConfig(), broker_id=me)
        self.log_manager.open()
        self.manager = ReplicaManager(me, store, self.log_manager,
                                      ReplicaSettings(replica_lag_time_max_ms=1000, **settings),
                                      log_config_for=lambda topic: LogConfig(), clock=ManualClock())
        # What ClusterNode does: partition and topic events reach the replica manager.
        store.add_listener(self._on_event)
        self.store = store

    def _on_event(self, kind: str, key: Any) -> None:
        if kind == "partition":
            self.manager.apply_state(*key)
        elif kind == "topic":
            info = self.store.get_topic(key)
            for partition in range(info.partitions if info is not None else 1):
                self.manager.apply_state(key, partition)

    async def close(self) -> None:
        await self.manager.shutdown()
        self.log_manager.shutdown()


async def test_a_leader_tracks_an_added_replica_and_a_removed_broker_deletes_its_log(tmp_path):
    store = FakeStore(0, [0, 1, 2])
    store.add_topic("t", {0: [0, 1]})
    leader = Replicas(tmp_path, store, 0)
    store.set_state("t", 0, 0, 3, [0, 1])
    await leader.manager.leaders_settled()  # its leader epoch file is written off the loop
    partition = leader.manager.partitions[("t", 0)]
    _info, _wait = partition.append_records(bytearray(build_batch([(None, b"v", 1, [])])), 1, 1000)
    partition.follower_fetched(1, 1)
    assert partition.high_watermark == 1
    # A move adds broker 2: the leader serves and tracks it, and adds it to the ISR once
    # it caught up.
    store.add_topic("t", {0: [0, 1, 2]}, adding={0: (2,)})
    assert 2 in partition.remote
    partition.follower_fetched(2, 1)
    await leader.manager.clock.settle()
    assert store.isr_writes[-1] == ("t", 0, (0, 1, 2))
    await leader.close()

    # On broker 1, leaving the assignment deletes the replica's log.
    follower_store = FakeStore(1, [0, 1, 2])
    follower_store.add_topic("t", {0: [0, 1]})
    follower = Replicas(tmp_path, follower_store, 1)
    follower_store.set_state("t", 0, 0, 3, [0, 1])
    assert follower.log_manager.get_log("t", 0) is not None
    follower_store.add_topic("t", {0: [0, 2]})
    assert ("t", 0) not in follower.manager.partitions
    assert follower.log_manager.get_log("t", 0) is None
    await follower.close()


def test_the_reassignment_throttle_lets_through_its_rate_per_second():
    clock = ManualClock()
    rate = [1000]
    throttle = ByteRateThrottle(lambda: rate[0], clock)
    assert throttle.limited and not throttle.exceeded()  # one second's worth at first
    throttle.record(2500)  # a fetch may bring more than that: the debt is waited off
    assert throttle.exceeded()
    clock.advance(1_400)
    assert throttle.exceeded()
    clock.advance(200)
    assert not throttle.exceeded()
    clock.advance(60_000)  # an idle minute saves up one second's worth, no more
    throttle.record(1000)
    assert throttle.exceeded()
    rate[0] = UNLIMITED  # a dynamic change applies at once
    assert not throttle.limited and not throttle.exceeded()


async def test_requests_still_queued_at_stop_answer_not_controller(running):
    controller, _store, _clock = await running()
    # Nothing runs the queue before the stop: the request is still waiting there.
    pending = asyncio.ensure_future(controller.alter_reassignments({("t", 0): [2, 3, 4]}, True, 5))
    await asyncio.sleep(0)
    await controller.stop()
    with pytest.raises(KafkaError) as refused:
        await pending
    assert refused.value.code == ErrorCode.NOT_CONTROLLER


async def test_a_partition_without_followers_pins_its_high_watermark_once_a_replica_is_added(tmp_path):
    store = FakeStore(0, [0, 1])
    store.add_topic("t", {0: [0]})
    leader = Replicas(tmp_path, store, 0)
    store.set_state("t", 0, 0, 0, [0])
    await leader.manager.leaders_settled()
    partition = leader.manager.partitions[("t", 0)]

    def append(count: int) -> Any:
        records = bytearray(build_batch([(None, b"v%d" % i, 1, []) for i in range(count)]))
        return partition.append_records(records, -1, 5000)[1]

    assert append(3) is None and partition.high_watermark == 3  # alone: the log end, at once
    store.add_topic("t", {0: [1, 0]}, adding={0: (1,)})  # a move to [1] adds broker 1
    assert set(partition.remote) == {1}
    assert append(2) is None and partition.high_watermark == 5  # 1 is not in the ISR yet
    partition.follower_fetched(1, 5)
    await leader.manager.clock.settle()
    assert store.isr_writes[-1] == ("t", 0, (0, 1))
    waiting = asyncio.ensure_future(append(1))  # now acks=all waits for broker 1
    await leader.manager.clock.settle()
    assert partition.high_watermark == 5 and not waiting.done()
    partition.follower_fetched(1, 6)
    assert await waiting == ErrorCode.NONE and partition.high_watermark == 6
    # A move back to [0] alone: the high watermark follows the log end by itself again.
    store.set_state("t", 0, 0, 0, [0])
    store.add_topic("t", {0: [0]})
    assert partition.remote == {}
    assert append(4) is None and partition.high_watermark == 10
    await leader.close()


async def test_a_leader_sends_a_replica_being_added_no_more_than_its_throttled_rate(tmp_path):
    store = FakeStore(0, [0, 1, 2])
    store.add_topic("t", {0: [0, 1]})
    leader = Replicas(tmp_path, store, 0, leader_throttled_rate=lambda: 3000)
    store.set_state("t", 0, 0, 0, [0, 1])
    await leader.manager.leaders_settled()
    partition = leader.manager.partitions[("t", 0)]
    for _ in range(10):  # ten batches of about 1 kB
        partition.append_records(bytearray(build_batch([(None, b"x" * 1000, 1, [])])), 1, 1000)
    store.add_topic("t", {0: [0, 1, 2]}, adding={0: (2,)})
    manager, clock = leader.manager, leader.manager.clock

    def limit(replica: int, offset: int) -> int:
        return manager.log_for_fetch("t", 0, replica, offset, -1)[1]

    assert limit(1, 10) == 10  # an in-sync follower is never held back
    offset = 0
    while (after := limit(2, offset)) > offset:  # whole batches, while the rate lasts
        offset = after
    assert 3 <= offset <= 6  # about one second's worth (3 kB), then nothing for now
    assert limit(1, 10) == 10
    clock.advance(1_000)
    assert limit(2, offset) > offset
    await leader.close()
