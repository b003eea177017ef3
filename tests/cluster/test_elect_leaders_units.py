"""ElectLeaders in the controller, on an in-memory store and a ManualClock: preferred
elections (moved, not needed, preferred replica not in sync), unclean elections (a live
in-sync replica first, else any live replica, else none eligible), unknown partitions,
and a null partition list meaning every partition."""

from __future__ import annotations

import pytest

from pykfk.clock import ManualClock
from pykfk.cluster.controller import PREFERRED, UNCLEAN, Controller, ControllerSettings
from pykfk.cluster.metadata import NO_LEADER
from pykfk.errors import ErrorCode

from .fakes import FakeStore

pytestmark = pytest.mark.timeout(30)


def leader_and_isr(store: FakeStore, topic: str = "t", partition: int = 0) -> tuple[int, int, list[int]]:
    state = store.partition_state(topic, partition)
    assert state is not None
    return state.leader, state.leader_epoch, sorted(state.isr)


@pytest.fixture
async def running():
    """Broker 0 is the controller of brokers 0, 1, 2; t-0 is on [1, 2, 0], led by 1."""
    store = FakeStore(0, [0, 1, 2])
    clock = ManualClock()
    controller = Controller(0, store, ControllerSettings(auto_leader_rebalance=False), clock=clock)
    controller.start()
    await clock.settle()
    store.add_topic("t", {0: [1, 2, 0]})
    await clock.settle()
    yield controller, store, clock
    await controller.stop()


async def test_preferred_election_moves_leadership_back_once(running):
    controller, store, _clock = running
    store.set_state("t", 0, 2, 4, [0, 1, 2])
    outcome = await controller.elect_leaders(PREFERRED, [("t", 0)], 5)
    assert outcome == {("t", 0): (ErrorCode.NONE, None)}
    assert leader_and_isr(store) == (1, 5, [0, 1, 2])
    again = await controller.elect_leaders(PREFERRED, [("t", 0)], 5)
    assert again[("t", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED
    assert leader_and_isr(store) == (1, 5, [0, 1, 2])


async def test_preferred_election_needs_the_preferred_replica_in_sync_and_alive(running):
    controller, store, clock = running
    store.set_state("t", 0, 2, 4, [0, 2])  # 1 is out of the ISR
    outcome = await controller.elect_leaders(PREFERRED, [("t", 0)], 5)
    assert outcome[("t", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    store.set_state("t", 0, 2, 5, [0, 1, 2])
    store.kill(1)
    await clock.settle()
    outcome = await controller.elect_leaders(PREFERRED, [("t", 0)], 5)
    assert outcome[("t", 0)][0] == ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    assert leader_and_isr(store)[0] == 2


async def test_unclean_election_picks_a_live_replica_of_an_offline_partition(running):
    controller, store, clock = running
    # Online partition: nothing to do.
    outcome = await controller.elect_leaders(UNCLEAN, [("t", 0)], 5)
    assert outcome[("t", 0)][0] == ErrorCode.ELECTION_NOT_NEEDED
    # Only 1 was in sync, and it died: offline (unclean election is off by config).
    store.set_state("t", 0, 1, 3, [1])
    store.kill(1)
    await clock.settle()
    assert leader_and_isr(store) == (NO_LEADER, 4, [1])
    outcome = await controller.elect_leaders(UNCLEAN, [("t", 0)], 5)
    assert outcome == {("t", 0): (ErrorCode.NONE, None)}
    assert leader_and_isr(store) == (2, 5, [2])


async def test_unclean_election_without_any_live_replica_finds_no_eligible_leader(running):
    controller, store, clock = running
    store.add_topic("solo", {0: [2]})
    await clock.settle()
    store.kill(2)
    await clock.settle()
    assert leader_and_isr(store, "solo")[0] == NO_LEADER
    outcome = await controller.elect_leaders(UNCLEAN, [("solo", 0)], 5)
    assert outcome[("solo", 0)][0] == ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert leader_and_isr(store, "solo")[0] == NO_LEADER


async def test_unknown_partitions_and_every_partition(running):
    controller, store, clock = running
    store.add_topic("u", {0: [0, 1], 1: [2, 0]})
    await clock.settle()
    store.set_state("u", 1, 0, 2, [0, 2])
    outcome = await controller.elect_leaders(PREFERRED, [("u", 7), ("nope", 0)], 5)
    assert {k: v[0] for k, v in outcome.items()} == {
        ("u", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    everything = await controller.elect_leaders(PREFERRED, None, 5)
    assert {k: v[0] for k, v in everything.items()} == {
        ("t", 0): ErrorCode.ELECTION_NOT_NEEDED,
        ("u", 0): ErrorCode.ELECTION_NOT_NEEDED,
        ("u", 1): ErrorCode.NONE,
    }
    assert leader_and_isr(store, "u", 1) == (2, 3, [0, 2])
