"""Metadata's encoded partition arrays: spliced into responses byte-identical to a plain
encoding, and never served stale after the store announces a change."""

from __future__ import annotations

import pytest

from pykfk.cluster.embedded import EmbeddedMetadataStore
from pykfk.cluster.metadata import BrokerInfo
from pykfk.protocol.framing import decode_response, encode_response, response_field_encoder
from pykfk.server.handlers.metadata import API_KEY, PARTITIONS_FIELD, VERSIONS, EncodedPartitions
from tests.cluster.fakes import FakeStore


def _partition(index: int, leader: int) -> dict:
    return {"error_code": 0, "partition_index": index, "leader_id": leader, "leader_epoch": 3,
            "replica_nodes": [1, 2, 3], "isr_nodes": [leader, 2], "offline_replicas": [3]}


def _response(partitions) -> dict:
    return {"throttle_time_ms": 0, "brokers": [{"node_id": 1, "host": "h", "port": 1, "rack": None}],
            "cluster_id": "c", "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": partitions}]}


@pytest.mark.parametrize("version", range(VERSIONS[0], VERSIONS[1] + 1))
def test_pre_encoded_partitions_make_the_same_bytes_as_a_plain_encoding(version):
    partitions = [_partition(i, 1 + i % 3) for i in range(50)]
    encoded = response_field_encoder(API_KEY, version, PARTITIONS_FIELD)(partitions)
    plain = b"".join(encode_response(API_KEY, version, 7, _response(partitions)))
    spliced = b"".join(encode_response(API_KEY, version, 7, _response(encoded)))
    assert spliced == plain


def _decoded(cache: EncodedPartitions, store, topic: str, version: int = 5) -> list:
    body = _response(cache.get(store.get_topic(topic), version, 0))
    frame = b"".join(encode_response(API_KEY, version, 1, body))[4:]
    return decode_response(API_KEY, version, frame)[1].topics[0].partitions


async def test_new_partitions_appear_at_once_in_a_cluster_of_one(tmp_path):
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(0, "127.0.0.1", 9092))
    cache = EncodedPartitions(store)
    await store.create_topic("grows", 3, 1, {})
    assert [p.partition_index for p in _decoded(cache, store, "grows")] == [0, 1, 2]
    await store.create_partitions("grows", 5)
    assert [p.partition_index for p in _decoded(cache, store, "grows")] == [0, 1, 2, 3, 4]


def test_leader_changes_and_lost_brokers_reach_the_next_response():
    store = FakeStore(0, [0, 1, 2])
    store.add_topic("t", {0: [0, 1, 2], 1: [1, 2, 0]})
    cache = EncodedPartitions(store)
    store.set_state("t", 0, 0, 1, [0, 1, 2])
    store.set_state("t", 1, 1, 1, [1, 2, 0])
    first = _decoded(cache, store, "t")
    assert [(p.leader_id, p.offline_replicas) for p in first] == [(0, []), (1, [])]
    assert _decoded(cache, store, "t") == first          # served from the cache
    store.set_state("t", 1, 2, 2, [2, 0])                # leader 1 -> 2
    store.kill(1)
    after = _decoded(cache, store, "t")
    assert after[1].leader_id == 2
    assert [p.offline_replicas for p in after] == [[1], [1]]
    assert after[1].isr_nodes == [2, 0]


async def test_a_change_to_one_topic_keeps_the_others_encoded(tmp_path):
    store = EmbeddedMetadataStore(str(tmp_path / "meta"), BrokerInfo(0, "127.0.0.1", 9092))
    cache = EncodedPartitions(store)
    await store.create_topic("big", 100, 1, {})
    big = cache.get(store.get_topic("big"), 5, 0)
    await store.create_topic("small", 1, 1, {})
    assert cache.get(store.get_topic("big"), 5, 0) is big
    await store.create_partitions("big", 101)
    assert cache.get(store.get_topic("big"), 5, 0) is not big
