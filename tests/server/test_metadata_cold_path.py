"""The first Metadata of a topic after a change: its partitions read from the store as
plain tuples and encoded in compiled code, byte-identical to the generic encoding of the
partition entries as the handler has always described them."""

from __future__ import annotations

from typing import Any

import pytest

from pykfk.cluster.embedded import EmbeddedMetadataStore
from pykfk.cluster.metadata import NO_LEADER, BrokerInfo, MetadataStore, TopicInfo
from pykfk.errors import ErrorCode
from pykfk.protocol.framing import response_field_encoder
from pykfk.server.handlers.metadata import (
    API_KEY,
    PARTITIONS_FIELD,
    VERSIONS,
    EncodedPartitions,
    partition_entries,
    partition_entry,
)
from tests.cluster.fakes import FakeStore

ALL_VERSIONS = range(VERSIONS[0], VERSIONS[1] + 1)


def _described(store: MetadataStore, info: TopicInfo, partition: int, me: int, live: set[int]) -> dict[str, Any]:
    """A partition's entry as a dict, spelled out field by field (the generic encoder's input)."""
    replicas = list(info.replicas(partition, me))
    state = store.partition_state(info.name, partition)
    led = state is not None and state.leader != NO_LEADER
    return {
        "error_code": ErrorCode.NONE if led else ErrorCode.LEADER_NOT_AVAILABLE,
        "partition_index": partition,
        "leader_id": state.leader if led and state is not None else NO_LEADER,
        "leader_epoch": state.leader_epoch if state is not None else -1,
        "replica_nodes": replicas,
        "isr_nodes": list(state.isr) if state is not None else [],
        "offline_replicas": [r for r in replicas if r not in live],
    }


def _generic(store: MetadataStore, info: TopicInfo, version: int, me: int) -> bytes:
    live = {b.node_id for b in store.brokers()}
    partitions = [_described(store, info, p, me, live) for p in range(info.partitions)]
    return bytes(response_field_encoder(API_KEY, version, PARTITIONS_FIELD)(partitions))


def _cluster() -> FakeStore:
    """Partitions led, leaderless, never elected; offline replicas, empty and long ISRs."""
    store = FakeStore(0, range(12))
    store.add_topic("t", {p: [(p + i) % 12 for i in range(1 + p % 6)] for p in range(40)})
    for p in range(40):
        replicas = store.get_topic("t").replicas(p, 0)
        if p % 7 == 3:
            continue  # no state yet
        if p % 5 == 1:
            store.set_state("t", p, NO_LEADER, 4, [])
        else:
            store.set_state("t", p, replicas[0], p, replicas)
    store.kill(2)
    store.kill(7)
    return store


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_cold_encoding_equals_the_generic_one(version: int) -> None:
    store = _cluster()
    info = store.get_topic("t")
    assert info is not None
    encoded = EncodedPartitions(store).get(info, version, 0)
    assert bytes(encoded) == _generic(store, info, version, 0)


def test_entries_cover_every_case() -> None:
    store = _cluster()
    info = store.get_topic("t")
    assert info is not None
    live = {b.node_id for b in store.brokers()}
    entries = partition_entries(store, info, 0, live, range(info.partitions))
    assert {e[0] for e in entries} == {ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE}
    assert any(e[6] for e in entries) and any(not e[5] for e in entries) and max(len(e[5]) for e in entries) == 6
    assert [dict(e) for e in [partition_entry(store, info, p, 0, live) for p in range(40)]] == [
        {**d, "replica_nodes": tuple(d["replica_nodes"]), "isr_nodes": tuple(d["isr_nodes"]),
         "offline_replicas": d["offline_replicas"] or ()}
        for d in (_described(store, info, p, 0, live) for p in range(40))]


@pytest.mark.parametrize("version", [0, 5, 9, 12])
async def test_a_topic_of_ten_thousand_partitions(tmp_path, version: int) -> None:
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(3, "127.0.0.1", 9092))
    await store.create_topic("big", 10_000, 1, {})
    info = store.get_topic("big")
    assert info is not None
    encoded = EncodedPartitions(store).get(info, version, 3)
    assert bytes(encoded) == _generic(store, info, version, 3)
