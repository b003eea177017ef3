"""Replica assignment and the leader epoch cache: pure logic, no ZooKeeper."""

from __future__ import annotations

import collections

import pytest

from pykfk.cluster.assignment import AssignmentError, assign_replicas
from pykfk.cluster.leader_epoch import CHECKPOINT_FILE, LeaderEpochCache


@pytest.mark.parametrize("brokers,partitions,factor", [(3, 3, 3), (5, 20, 3), (4, 7, 2), (6, 60, 1)])
def test_assignment_spreads_replicas_and_leaders(brokers, partitions, factor):
    layout = assign_replicas(range(brokers), partitions, factor, start_index=0, shift=0)
    assert sorted(layout) == list(range(partitions))
    for replicas in layout.values():
        assert len(replicas) == factor and len(set(replicas)) == factor
    leaders = collections.Counter(r[0] for r in layout.values())
    replicas_per_broker = collections.Counter(b for r in layout.values() for b in r)
    assert max(leaders.values()) - min(leaders.values(), default=0) <= 1 or len(leaders) < brokers
    assert max(replicas_per_broker.values()) - min(replicas_per_broker.values()) <= factor


def test_assignment_is_rack_aware():
    racks = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
    layout = assign_replicas(racks, 30, 3, racks=racks, start_index=0, shift=0)
    for replicas in layout.values():
        assert len({racks[b] for b in replicas}) == 3, replicas
        assert len(set(replicas)) == 3


def test_assignment_continues_numbering_for_new_partitions():
    layout = assign_replicas([0, 1, 2], 2, 2, first_partition=4, start_index=1, shift=0)
    assert sorted(layout) == [4, 5]


def test_assignment_refusals():
    with pytest.raises(AssignmentError, match="larger than available brokers"):
        assign_replicas([0, 1], 1, 3)
    with pytest.raises(AssignmentError, match="rack information"):
        assign_replicas([0, 1], 1, 2, racks={0: "a", 1: None})


def test_leader_epoch_cache_end_offsets_and_truncation(tmp_path):
    cache = LeaderEpochCache(str(tmp_path))
    assert cache.end_offset_for(0, 0) == (-1, -1)
    cache.assign(0, 0)
    cache.assign(0, 50)  # same epoch again: ignored
    cache.assign(2, 100)
    cache.assign(5, 250)
    log_end = 300
    assert cache.end_offset_for(0, log_end) == (0, 100)
    assert cache.end_offset_for(1, log_end) == (0, 100)  # epoch 1 never wrote: epoch 0's end
    assert cache.end_offset_for(3, log_end) == (2, 250)
    assert cache.end_offset_for(5, log_end) == (5, 300)
    assert cache.end_offset_for(9, log_end) == (5, 300)
    cache.truncate_from_end(250)
    assert cache.entries == [(0, 0), (2, 100)]
    reopened = LeaderEpochCache(str(tmp_path))
    assert reopened.entries == [(0, 0), (2, 100)]
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n2 100\n"


def test_leader_epoch_cache_ignores_a_damaged_file(tmp_path):
    (tmp_path / CHECKPOINT_FILE).write_text("0\n3\n1 0\n")
    assert LeaderEpochCache(str(tmp_path)).entries == []
