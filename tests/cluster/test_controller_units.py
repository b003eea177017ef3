"""The controller's decisions on an in-memory store and a ManualClock: first leaders of
new topics, failover to the next in-sync replica, followers leaving the ISR, unclean
election on and off, controlled shutdown, preferred leaders, and fencing by the
controller epoch."""

from __future__ import annotations

from typing import Any

import pytest

from pykfk.clock import ManualClock
from pykfk.cluster.controller import Controller, ControllerSettings
from pykfk.cluster.metadata import NO_LEADER

from .fakes import FakeStore

pytestmark = pytest.mark.timeout(30)


def leader_and_isr(store: FakeStore, topic: str = "t", partition: int = 0) -> tuple[int, int, list[int]]:
    state = store.partition_state(topic, partition)
    assert state is not None
    return state.leader, state.leader_epoch, sorted(state.isr)


@pytest.fixture
async def running():
    """Broker 0 is the controller of brokers 0, 1, 2; t-0 is assigned to [1, 2, 0]."""
    made: list[Controller] = []

    async def start(**settings: Any) -> tuple[Controller, FakeStore, ManualClock]:
        store = FakeStore(0, [0, 1, 2])
        clock = ManualClock()
        controller = Controller(0, store, ControllerSettings(**settings), clock=clock)
        made.append(controller)
        controller.start()
        await clock.settle()
        assert controller.active and store.controller_id() == 0
        store.add_topic("t", {0: [1, 2, 0]})
        await clock.settle()
        return controller, store, clock

    yield start
    for controller in made:
        await controller.stop()


async def test_a_new_topic_gets_its_first_live_replica_as_leader(running):
    _controller, store, _clock = await running()
    assert leader_and_isr(store) == (1, 0, [0, 1, 2])


async def test_a_dead_leader_is_replaced_by_the_next_in_sync_replica_at_a_new_epoch(running):
    _controller, store, clock = await running()
    store.kill(1)
    await clock.settle()
    assert leader_and_isr(store) == (2, 1, [0, 2])


async def test_a_dead_follower_leaves_the_isr_and_the_leader_and_epoch_stay(running):
    _controller, store, clock = await running()
    store.kill(2)
    await clock.settle()
    assert leader_and_isr(store) == (1, 0, [0, 1])


async def test_without_unclean_election_a_partition_whose_isr_is_dead_goes_offline(running):
    _controller, store, clock = await running(unclean_leader_election=False)
    store.set_state("t", 0, 1, 3, [1])  # only the leader was in sync
    store.kill(1)
    await clock.settle()
    leader, epoch, isr = leader_and_isr(store)
    assert (leader, epoch, isr) == (NO_LEADER, 4, [1])  # the last ISR member is kept


async def test_with_unclean_election_a_live_out_of_sync_replica_takes_over(running):
    _controller, store, clock = await running(unclean_leader_election=True)
    store.set_state("t", 0, 1, 3, [1])
    store.kill(1)
    await clock.settle()
    assert leader_and_isr(store) == (2, 4, [2])


async def test_controlled_shutdown_moves_leadership_and_reports_what_stays(running):
    _controller, store, clock = await running()
    store.add_topic("solo", {0: [1]})
    await clock.settle()
    store.request_shutdown(1)
    await clock.settle()
    assert leader_and_isr(store) == (2, 1, [0, 2])
    assert leader_and_isr(store, "solo") == (1, 0, [1])  # nobody else can lead it
    assert store.processed_shutdowns == {1: 1}


async def test_preferred_leaders_come_back_on_the_imbalance_check(running):
    _controller, store, clock = await running(auto_leader_rebalance=True, imbalance_check_interval_s=300,
                                              imbalance_per_broker_percentage=0)
    store.set_state("t", 0, 2, 4, [0, 1, 2])  # leadership moved away from broker 1 earlier
    await clock.tick(299_000)
    assert leader_and_isr(store)[0] == 2
    await clock.tick(1_000)
    assert leader_and_isr(store) == (1, 5, [0, 1, 2])


async def test_a_controller_whose_epoch_was_taken_over_stops_writing(running):
    controller, store, clock = await running()
    # A newer controller bumped the epoch; this one has not heard of it yet.
    store.controller_epoch_value += 1
    store.controller_epoch_version += 1
    store.kill(1)
    await clock.settle()
    assert leader_and_isr(store) == (1, 0, [0, 1, 2])  # the stale write was refused
    assert not controller.active


async def test_deleting_a_topic_removes_its_states(running):
    _controller, store, clock = await running()
    store.request_deletion("t")
    await clock.settle()
    assert store.get_topic("t") is None and store.partition_state("t", 0) is None
