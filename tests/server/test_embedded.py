"""Embedded metadata store: persistence, atomic rewrites, producer id blocks."""

import asyncio
import json
import os

import pytest

from pykfk.cluster.embedded import METADATA_FILE, EmbeddedMetadataStore, MetadataFileError
from pykfk.cluster.metadata import BrokerInfo, MetadataStore, TopicExistsError, UnknownTopicError

BROKER = BrokerInfo(0, "127.0.0.1", 9092)


def test_topics_survive_reopen(tmp_path):
    store = EmbeddedMetadataStore(str(tmp_path), BROKER)
    assert isinstance(store, MetadataStore)
    asyncio.run(store.create_topic("orders", 8, 1, {"retention.ms": "1000"}))
    asyncio.run(store.create_partitions("orders", 10))
    asyncio.run(store.create_topic("gone", 1, 1, {}))
    asyncio.run(store.delete_topic("gone"))
    cluster_id = store.cluster_id

    reopened = EmbeddedMetadataStore(str(tmp_path), BROKER)
    assert reopened.cluster_id == cluster_id
    assert list(reopened.topics()) == ["orders"]
    orders = reopened.get_topic("orders")
    assert orders.partitions == 10
    assert dict(orders.configs) == {"retention.ms": "1000"}
    assert orders.topic_id == store.get_topic("orders").topic_id
    assert not os.path.exists(os.path.join(tmp_path, METADATA_FILE + ".tmp"))


def test_errors_for_existing_and_unknown_topics(tmp_path):
    store = EmbeddedMetadataStore(str(tmp_path), BROKER)
    asyncio.run(store.create_topic("t", 1, 1, {}))
    with pytest.raises(TopicExistsError):
        asyncio.run(store.create_topic("t", 1, 1, {}))
    with pytest.raises(UnknownTopicError):
        asyncio.run(store.delete_topic("nope"))


def test_producer_ids_are_never_reused_after_restart(tmp_path):
    store = EmbeddedMetadataStore(str(tmp_path), BROKER)
    first = [store.allocate_producer_id_now() for _ in range(5)]
    assert first == sorted(set(first))
    again = EmbeddedMetadataStore(str(tmp_path), BROKER)
    later = [again.allocate_producer_id_now() for _ in range(5)]
    assert min(later) > max(first)


def test_corrupt_file_is_reported(tmp_path):
    (tmp_path / METADATA_FILE).write_text("{not json")
    with pytest.raises(MetadataFileError, match=METADATA_FILE):
        EmbeddedMetadataStore(str(tmp_path), BROKER)
    (tmp_path / METADATA_FILE).write_text(json.dumps({"version": 99}))
    with pytest.raises(MetadataFileError, match="version"):
        EmbeddedMetadataStore(str(tmp_path), BROKER)
