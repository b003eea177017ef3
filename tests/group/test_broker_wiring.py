"""The group coordinator inside a broker: ``__consumer_offsets`` created on the first
FindCoordinator, shown as internal, protected from deletion, loaded again at start with the
partition count it was created with; group settings from the broker config."""

from __future__ import annotations

import pytest

from pykfk._core.records import build_batch
from pykfk.config import BrokerConfig, ConfigError
from pykfk.errors import ErrorCode
from pykfk.testing import InProcessBroker, RawClient

E = ErrorCode
PRODUCE, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 0, 3, 8, 9, 10
CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 19, 20, 37
OFFSETS = "__consumer_offsets"


def _start(path, **overrides) -> InProcessBroker:
    return InProcessBroker(str(path), {"offsets.topic.num.partitions": 3, **overrides}).start()


def _topics(raw: RawClient) -> dict[str, tuple[int, bool]]:
    response = raw.call(METADATA, 5, {"topics": None, "allow_auto_topic_creation": False})
    return {t.name: (len(t.partitions), t.is_internal) for t in response.topics}


def _find(raw: RawClient, group: str):
    return raw.call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})


def _commit(raw: RawClient, group: str, topic: str, partition: int, offset: int):
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time_ms": -1, "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "committed_offset": offset, "committed_metadata": "m"}]}]}
    return raw.call(OFFSET_COMMIT, 3, body).topics[0].partitions[0].error_code


def _fetch(raw: RawClient, group: str) -> dict:
    response = raw.call(OFFSET_FETCH, 3, {"group_id": group, "topics": None})
    assert response.error_code == E.NONE
    return {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}


@pytest.fixture
def broker(tmp_path):
    b = _start(tmp_path / "data")
    yield b
    b.stop()
    assert not b.loop_errors, b.loop_errors


def test_offsets_topic_appears_on_first_find_coordinator_as_an_internal_topic(broker):
    raw = RawClient(broker.host, broker.port)
    try:
        raw.call(CREATE_TOPICS, 4, {"topics": [{"name": "plain", "num_partitions": 2, "replication_factor": 1,
                                                "assignments": [], "configs": []}], "timeout_ms": 5000})
        assert _topics(raw) == {"plain": (2, False)}
        # Before the topic exists no group is coordinated here (clients ask FindCoordinator first).
        assert raw.call(OFFSET_FETCH, 3, {"group_id": "g", "topics": None}).error_code == E.NOT_COORDINATOR

        found = _find(raw, "g")
        assert (found.error_code, found.node_id, found.host, found.port) == (E.NONE, 0, broker.host, broker.port)
        assert _topics(raw) == {"plain": (2, False), OFFSETS: (3, True)}
        for p in range(3):
            log = broker.broker.get_log(OFFSETS, p)
            assert log is not None and not log.config.deletes_segments  # compacted, never aged out

        assert _commit(raw, "g", "plain", 1, 42) == E.NONE
        assert _fetch(raw, "g") == {("plain", 1): 42}

        # Users cannot remove it or change its partition count, nor create it again.
        deleted = raw.call(DELETE_TOPICS, 3, {"topic_names": [OFFSETS], "timeout_ms": 5000})
        assert deleted.responses[0].error_code == E.INVALID_TOPIC_EXCEPTION
        grown = raw.call(CREATE_PARTITIONS, 1, {"topics": [{"name": OFFSETS, "count": 10, "assignments": None}],
                                                "timeout_ms": 5000, "validate_only": False})
        assert grown.results[0].error_code == E.INVALID_TOPIC_EXCEPTION
        created = raw.call(CREATE_TOPICS, 4, {"topics": [{"name": OFFSETS, "num_partitions": 1, "replication_factor": 1,
                                                          "assignments": [], "configs": []}], "timeout_ms": 5000})
        assert created.topics[0].error_code == E.TOPIC_ALREADY_EXISTS
        # Nor write into it: only the coordinator appends committed offsets.
        batch = build_batch([(b"forged-key", b"forged-value", 0, [])])
        produced = raw.call(PRODUCE, 7, {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                                         "topic_data": [{"name": OFFSETS, "partition_data": [
                                             {"index": 0, "records": batch}]}]})
        assert produced.responses[0].partition_responses[0].error_code == E.INVALID_TOPIC_EXCEPTION
        assert _topics(raw)[OFFSETS] == (3, True)
        assert _fetch(raw, "g") == {("plain", 1): 42}

        # Asking for a transaction coordinator creates __transaction_state the same way.
        found = raw.call(FIND_COORDINATOR, 1, {"key": "tx", "key_type": 1})
        assert (found.error_code, found.port) == (E.NONE, broker.port)
        assert _topics(raw)["__transaction_state"] == (50, True)
    finally:
        raw.close()


def test_restart_loads_offsets_with_the_partition_count_the_topic_was_created_with(tmp_path):
    first = _start(tmp_path / "data")
    raw = RawClient(first.host, first.port)
    try:
        raw.call(CREATE_TOPICS, 4, {"topics": [{"name": "plain", "num_partitions": 1, "replication_factor": 1,
                                                "assignments": [], "configs": []}], "timeout_ms": 5000})
        _find(raw, "g")
        groups = [f"group-{i}" for i in range(8)]  # spread over the 3 offsets partitions
        for i, group in enumerate(groups):
            assert _commit(raw, group, "plain", 0, 100 + i) == E.NONE
    finally:
        raw.close()
        first.stop()

    # A different setting now: the existing topic's 3 partitions still decide where groups live.
    second = _start(tmp_path / "data", **{"offsets.topic.num.partitions": 7})
    raw = RawClient(second.host, second.port)
    try:
        assert second.broker.group_coordinator.config.offsets_topic_num_partitions == 3
        assert _topics(raw)[OFFSETS] == (3, True)
        for i, group in enumerate(groups):  # loaded at start: no FindCoordinator needed
            assert _fetch(raw, group) == {("plain", 0): 100 + i}
    finally:
        raw.close()
        second.stop()
    assert not second.loop_errors


def test_group_settings_reach_the_coordinator(tmp_path):
    b = _start(tmp_path / "data", **{
        "group.min.session.timeout.ms": 1000, "group.max.session.timeout.ms": 60000,
        "group.initial.rebalance.delay.ms": 0, "group.max.size": 5,
        "group.member.metadata.max.bytes": 2048, "offsets.retention.minutes": 60,
        "offsets.retention.check.interval.ms": 1000, "offset.metadata.max.bytes": 100})
    try:
        c = b.broker.group_coordinator.config
        assert (c.group_min_session_timeout_ms, c.group_max_session_timeout_ms,
                c.group_initial_rebalance_delay_ms, c.group_max_size,
                c.group_member_metadata_max_bytes, c.offsets_retention_minutes,
                c.offsets_retention_check_interval_ms, c.offset_metadata_max_bytes,
                c.offsets_topic_num_partitions) == (1000, 60000, 0, 5, 2048, 60, 1000, 100, 3)
    finally:
        b.stop()


@pytest.mark.parametrize("key, value", [
    ("group.max.size", "0"), ("offsets.retention.minutes", "0"), ("group.min.session.timeout.ms", "-1"),
    ("offset.metadata.max.bytes", "many"), ("offsets.topic.num.partitions", "0"),
])
def test_bad_group_settings_are_refused(key, value):
    with pytest.raises(ConfigError) as info:
        BrokerConfig({key: value})
    assert info.value.key == key


def test_naming_the_offsets_topic_in_metadata_creates_it_with_its_own_settings(broker):
    raw = RawClient(broker.host, broker.port)
    try:
        response = raw.call(METADATA, 5, {"topics": [{"name": OFFSETS}], "allow_auto_topic_creation": True})
        topic = response.topics[0]
        assert (topic.error_code, topic.is_internal, len(topic.partitions)) == (E.NONE, True, 3)
        assert not broker.broker.get_log(OFFSETS, 0).config.deletes_segments
        assert broker.broker.group_coordinator.owned_partitions == {0, 1, 2}
    finally:
        raw.close()
