"""Metadata's per-topic cache over the ZooKeeper store: a real ZooKeeper, the store of
broker 0 in this process, and Kafka's znodes written the way a controller writes them.
After each change (leader, ISR, a broker lost, partitions added, the topic deleted) the
cached encoding equals a fresh encoding of the store's view."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest

from pykfk.cluster.metadata import BrokerInfo, PartitionState
from pykfk.cluster.zookeeper import (
    ZooKeeperMetadataStore,
    _broker_json,
    _topic_json,
    encode_state,
    state_path,
)
from pykfk.server.handlers.metadata import EncodedPartitions
from tests.server.test_metadata_cold_path import _generic

VERSIONS = (1, 5, 9, 12)


def _assert_current(cache: EncodedPartitions, store: ZooKeeperMetadataStore, topic: str) -> None:
    info = store.get_topic(topic)
    assert info is not None
    for version in VERSIONS:
        assert bytes(cache.get(info, version, 0)) == _generic(store, info, version, 0), version


async def _until(store: ZooKeeperMetadataStore, condition: Callable[[], bool], what: str) -> None:
    assert await store.wait_for(condition, 15), what


def _replicas(p: int) -> list[int]:
    return [p % 3, (p + 1) % 3, (p + 2) % 3]


@pytest.fixture
async def zk_store(zookeeper_chroot: str) -> Any:
    store = ZooKeeperMetadataStore(zookeeper_chroot, BrokerInfo(0, "127.0.0.1", 9092), session_timeout_ms=6000)
    await store.start()
    from kazoo.client import KazooClient

    writer = KazooClient(hosts=zookeeper_chroot)
    await asyncio.get_running_loop().run_in_executor(None, writer.start)
    try:
        yield store, writer
    finally:
        writer.stop()
        writer.close()
        store.close()


def _set_state(writer: Any, topic: str, p: int, leader: int, epoch: int, isr: list[int], create: bool = False) -> None:
    data = encode_state(PartitionState(leader, epoch, tuple(isr), 1))
    if create:
        writer.create(state_path(topic, p), data, makepath=True)
    else:
        writer.set(state_path(topic, p), data)


async def test_the_cache_follows_every_change_of_the_zookeeper_view(zk_store: Any) -> None:
    store, writer = zk_store
    cache = EncodedPartitions(store)  # before the topic exists, as on a running broker
    for b in (0, 1, 2):
        writer.create(f"/brokers/ids/{b}", _broker_json(BrokerInfo(b, "127.0.0.1", 9092 + b)),
                      ephemeral=True, makepath=True)
    writer.create("/brokers/topics/t", _topic_json({p: _replicas(p) for p in range(20)}, "ab" * 16), makepath=True)
    for p in range(20):
        _set_state(writer, "t", p, p % 3, 0, _replicas(p), create=True)
    await _until(store, lambda: len(store.live_broker_ids()) == 3 and all(
        store.partition_state("t", p) is not None for p in range(20)), "topic and leaders seen")
    _assert_current(cache, store, "t")
    states = cache.topics["t"].states

    _set_state(writer, "t", 3, 1, 1, [1, 2])  # leader 0 -> 1: a new epoch, 0 out of the ISR
    await _until(store, lambda: store.partition_state("t", 3).leader == 1, "leader change seen")
    assert cache.topics["t"].states is states  # updated in place, not read again
    _assert_current(cache, store, "t")

    _set_state(writer, "t", 4, 1, 0, [1])  # ISR shrink
    await _until(store, lambda: store.partition_state("t", 4).isr == (1,), "ISR shrink seen")
    _assert_current(cache, store, "t")

    writer.delete("/brokers/ids/2")  # a broker lost: its replicas offline everywhere
    await _until(store, lambda: store.live_broker_ids() == {0, 1}, "broker loss seen")
    _assert_current(cache, store, "t")

    # CreatePartitions: 20 -> 24, then the controller elects the new partitions' leaders.
    writer.set("/brokers/topics/t", _topic_json({p: _replicas(p) for p in range(24)}, "ab" * 16))
    await _until(store, lambda: store.get_topic("t").partitions == 24, "new partitions seen")
    assert cache.topics["t"].states is states and len(states) == 24
    _assert_current(cache, store, "t")
    for p in range(20, 24):
        _set_state(writer, "t", p, 1, 0, [1, 0], create=True)
    await _until(store, lambda: all(store.partition_state("t", p) is not None for p in range(20, 24)),
                 "new leaders seen")
    _assert_current(cache, store, "t")

    writer.delete("/brokers/topics/t", recursive=True)  # the controller's last step of a deletion
    await _until(store, lambda: store.get_topic("t") is None, "deletion seen")
    assert "t" not in cache.topics

    # The name again, a new topic: nothing of the old one is served.
    writer.create("/brokers/topics/t", _topic_json({0: [1, 0]}, "cd" * 16))
    await _until(store, lambda: store.get_topic("t") is not None, "new topic seen")
    assert cache.topics["t"].states == [None]
    _assert_current(cache, store, "t")
    assert json.loads(writer.get("/brokers/topics/t")[0])["topic_id"] == store.get_topic("t").topic_id
