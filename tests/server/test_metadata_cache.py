"""Metadata's per-topic cache follows the store: each announced change updates the kept
partition states (one partition for a leader or ISR change, only the new partitions for
CreatePartitions) and the next response is what a fresh reading of the store encodes.
Also: the first Metadata of a big topic makes no GC-tracked object per partition."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from pykfk.cluster.embedded import EmbeddedMetadataStore
from pykfk.cluster.metadata import NO_LEADER, BrokerInfo, PartitionState
from pykfk.errors import ErrorCode
from pykfk.server.handlers.metadata import EncodedPartitions
from tests.cluster.fakes import FakeStore
from tests.server.test_metadata_cold_path import _generic

VERSIONS = (0, 5, 9, 12)


class CountingStore(FakeStore):
    """A FakeStore that counts the partition states the cache reads from it."""

    def __init__(self, me: int, brokers: Any):
        super().__init__(me, brokers)
        self.reads = 0

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        self.reads += 1
        return super().partition_state(topic, partition)

    def topic_states(self, topic: str, start: int, end: int) -> list[PartitionState | None]:
        self.reads += end - start
        return super().topic_states(topic, start, end)


def _assert_current(cache: EncodedPartitions, store: Any, topic: str, me: int = 0) -> None:
    info = store.get_topic(topic)
    assert info is not None
    for version in VERSIONS:
        assert bytes(cache.get(info, version, me)) == _generic(store, info, version, me), version


def _three_brokers() -> CountingStore:
    store = CountingStore(0, [0, 1, 2])
    store.add_topic("t", {p: [p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(30)})
    for p in range(30):
        store.set_state("t", p, p % 3, 0, [p % 3, (p + 1) % 3, (p + 2) % 3])
    return store


def test_a_leader_change_replaces_one_state_and_reaches_the_next_response() -> None:
    store = _three_brokers()
    cache = EncodedPartitions(store)
    _assert_current(cache, store, "t")
    states = cache.topics["t"].states
    reads = store.reads
    store.set_state("t", 4, 2, 1, [2, 0])  # leader 1 -> 2, epoch 1
    assert store.reads == reads + 1  # the one partition, not the topic
    assert cache.topics["t"].states is states and states[4] == store.partition_state("t", 4)
    _assert_current(cache, store, "t")
    reads = store.reads
    store.set_state("t", 5, NO_LEADER, 2, [])  # no leader left
    assert store.reads == reads + 1
    _assert_current(cache, store, "t")


def test_an_isr_shrink_reaches_the_next_response() -> None:
    store = _three_brokers()
    cache = EncodedPartitions(store)
    before = bytes(cache.get(store.get_topic("t"), 12, 0))
    store.set_state("t", 7, 1, 0, [1])
    after = bytes(cache.get(store.get_topic("t"), 12, 0))
    assert after != before
    _assert_current(cache, store, "t")


def test_a_lost_broker_makes_replicas_offline_without_reading_states_again() -> None:
    store = _three_brokers()
    cache = EncodedPartitions(store)
    _assert_current(cache, store, "t")
    reads = store.reads
    store.kill(2)
    info = store.get_topic("t")
    assert info is not None
    encoded = bytes(cache.get(info, 5, 0))
    assert store.reads == reads
    assert encoded == _generic(store, info, 5, 0)


def test_new_partitions_are_read_alone_and_encoded() -> None:
    store = _three_brokers()
    cache = EncodedPartitions(store)
    _assert_current(cache, store, "t")
    reads = store.reads
    grown = {p: [p % 3, (p + 1) % 3] for p in range(35)}
    grown.update({p: [p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(30)})
    store.add_topic("t", grown)  # CreatePartitions: 30 -> 35, no leaders yet
    assert store.reads == reads + 5
    assert len(cache.topics["t"].states) == 35
    _assert_current(cache, store, "t")
    reads = store.reads
    for p in range(30, 35):
        store.set_state("t", p, p % 3, 0, [p % 3, (p + 1) % 3])
    assert store.reads == reads + 5
    _assert_current(cache, store, "t")


async def test_a_deleted_topic_is_forgotten_and_a_new_one_read_afresh() -> None:
    store = _three_brokers()
    cache = EncodedPartitions(store)
    _assert_current(cache, store, "t")
    store.add_topic("other", {0: [1]})
    await store.delete_topic_znodes("t")
    assert "t" not in cache.topics and "other" in cache.topics
    store.add_topic("t", {0: [1, 2], 1: [2, 0]})  # the name again, two partitions, no leaders
    _assert_current(cache, store, "t")
    assert all(s is None for s in cache.topics["t"].states)
    store.set_state("t", 1, 2, 0, [2, 0])
    _assert_current(cache, store, "t")


def test_a_session_event_drops_everything() -> None:
    store = _three_brokers()
    cache = EncodedPartitions(store)
    _assert_current(cache, store, "t")
    store._notify("session", "CONNECTED")
    assert not cache.topics
    _assert_current(cache, store, "t")


async def test_standalone_create_partitions_and_delete(tmp_path) -> None:
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(0, "127.0.0.1", 9092))
    cache = EncodedPartitions(store)
    await store.create_topic("grows", 3, 1, {})
    assert len(cache.topics["grows"].states) == 3  # read at the creation, not at the first Metadata
    _assert_current(cache, store, "grows")
    await store.create_partitions("grows", 6)
    _assert_current(cache, store, "grows")
    old_id = store.get_topic("grows").topic_id
    await store.delete_topic("grows")
    assert "grows" not in cache.topics
    await store.create_topic("grows", 2, 1, {})
    assert store.get_topic("grows").topic_id != old_id
    _assert_current(cache, store, "grows")


@pytest.mark.parametrize("start,end", [(0, 4), (2, 7), (-2, 3), (4, 9), (6, 2), (0, 0)])
async def test_embedded_topic_states_are_partition_states(tmp_path, start: int, end: int) -> None:
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(3, "127.0.0.1", 9092))
    await store.create_topic("t", 5, 1, {})
    assert store.topic_states("t", start, end) == [store.partition_state("t", p) for p in range(start, end)]
    assert store.topic_states("none", start, end) == [None] * max(end - start, 0)


async def test_the_first_metadata_of_a_big_topic_sets_off_no_collection(tmp_path) -> None:
    """A request that allocates thousands of container objects sets off the collector
    (one young collection per 700), and after a big creation a full collection of the
    broker's heap is due: the cold path makes no tracked object per partition."""
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(0, "127.0.0.1", 9092))
    await store.create_topic("big", 10_000, 1, {})
    cache = EncodedPartitions(store)  # made after the creation: the first get reads the states
    info = store.get_topic("big")
    assert info is not None
    collections: list[int] = []

    def count(phase: str, details: dict[str, int]) -> None:
        if phase == "start":
            collections.append(details["generation"])

    enabled = gc.isenabled()
    gc.enable()
    gc.collect()  # the young generation empty: 700 allocations to the next collection
    gc.callbacks.append(count)
    try:
        encoded = cache.get(info, 12, 0)
    finally:
        gc.callbacks.remove(count)
        if not enabled:
            gc.disable()
    assert collections == []
    assert bytes(encoded) == _generic(store, info, 12, 0)


def test_a_state_error_names_its_partition() -> None:
    store = FakeStore(0, [0])
    store.add_topic("t", {0: [0], 1: [0]})
    store.set_state("t", 0, 0, 0, [0])
    store._states[("t", 1)] = PartitionState(2**40, 0, (0,))
    store._notify("partition", ("t", 1))
    with pytest.raises(OverflowError, match="partition entry 1: leader_id"):
        EncodedPartitions(store).get(store.get_topic("t"), 5, 0)
    assert ErrorCode.LEADER_NOT_AVAILABLE == 5 and ErrorCode.NONE == 0  # the codes compiled in


@pytest.mark.parametrize("version", [0, 5, 7, 9, 12])
def test_states_encoder_equals_the_tuple_encoder_for_any_mapping_and_live_container(version: int) -> None:
    import types

    from pykfk._core.metadata import encode_partition_states, encode_partitions
    from pykfk.server.handlers.metadata import partition_entries

    store = FakeStore(0, [0, 1, 2, 3])
    store.add_topic("t", {p: [(p + i) % 4 for i in range(1 + p % 4)] for p in range(16)})
    shared = store.set_state("t", 0, 0, 2, [0])
    for p in range(1, 16):
        if p % 5 == 2:
            continue  # no state
        if p % 4 == 1:
            store._states[("t", p)] = shared  # one object for several partitions
        else:
            store.set_state("t", p, NO_LEADER if p % 3 == 0 else p % 4, p, [p % 4, 1])
    store.kill(3)
    info = store.get_topic("t")
    assert info is not None
    live = store.live_broker_ids()
    expected = encode_partitions(version, partition_entries(store, info, 0, live, range(16)))
    states = store.topic_states("t", 0, 16)
    for assignment in (info.assignment, types.MappingProxyType(dict(info.assignment))):
        for live_ids in (live, frozenset(live), sorted(live)):
            assert encode_partition_states(version, states, assignment, (0,), live_ids) == expected
    assert encode_partition_states(version, [None, shared], {}, (7,), {0}) == encode_partitions(
        version, [(5, 0, -1, -1, (7,), (), (7,)), (0, 1, 0, 2, (7,), (0,), (7,))])
