"""Topic administration at today's versions: CreateTopics v5+ answers with the topic's
partitions, replication factor, settings and (v7) id; DeleteTopics v6 deletes by id;
ListOffsets v4+ checks the client's leader epoch and answers the offset's epoch."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient

LIST_OFFSETS, METADATA, CREATE_TOPICS, DELETE_TOPICS = 2, 3, 19, 20


def _create(raw: RawClient, version: int, name: str, validate_only: bool = False):
    return raw.call(CREATE_TOPICS, version, {"topics": [
        {"name": name, "num_partitions": 3, "replication_factor": 1, "assignments": [],
         "configs": [{"name": "retention.ms", "value": "3600000"}]}], "timeout_ms": 10000,
        "validate_only": validate_only}).topics[0]


def test_create_topics_v5_and_v7_answer_with_the_topics_shape(pykfk_broker):
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        validated = _create(raw, 5, "dry", validate_only=True)
        assert (validated.error_code, validated.num_partitions, validated.replication_factor) == (0, 3, 1)
        nothing = raw.call(METADATA, 12, {"topics": [{"name": "dry"}], "allow_auto_topic_creation": False})
        assert nothing.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # only validated

        created = _create(raw, 7, "shaped")
        assert (created.error_code, created.num_partitions, created.replication_factor) == (0, 3, 1)
        configs = {c.name: (c.value, c.config_source) for c in created.configs}
        assert configs["retention.ms"] == ("3600000", 1)  # DYNAMIC_TOPIC_CONFIG
        assert configs["cleanup.policy"] == ("delete", 5)  # DEFAULT_CONFIG
        listed = raw.call(METADATA, 12, {"topics": [{"name": "shaped"}], "allow_auto_topic_creation": False})
        assert created.topic_id == listed.topics[0].topic_id != uuid.UUID(int=0)
        assert _create(raw, 7, "shaped").error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    finally:
        raw.close()


def test_delete_topics_v6_by_id_and_unknown_ids(pykfk_broker):
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        topic_id = _create(raw, 7, "doomed").topic_id
        stranger = uuid.uuid4()
        answer = raw.call(DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": topic_id},
                                                        {"name": None, "topic_id": stranger},
                                                        {"name": "never-was", "topic_id": uuid.UUID(int=0)}],
                                             "timeout_ms": 10000})
        assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [
            ("doomed", topic_id, ErrorCode.NONE), (None, stranger, ErrorCode.UNKNOWN_TOPIC_ID),
            ("never-was", uuid.UUID(int=0), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        assert answer.responses[1].error_message
        gone = raw.call(METADATA, 12, {"topics": [{"name": "doomed"}], "allow_auto_topic_creation": False})
        assert gone.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    finally:
        raw.close()


def test_list_offsets_v4_checks_and_answers_leader_epochs(pykfk_broker):
    producer = Producer({"bootstrap.servers": pykfk_broker.bootstrap})
    for i in range(5):
        producer.produce("epochs", f"v{i}".encode(), partition=0)
    assert producer.flush(10) == 0
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)

    def latest(version: int, current_epoch: int):
        return raw.call(LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "epochs", "partitions": [
                {"partition_index": 0, "current_leader_epoch": current_epoch, "timestamp": -1}]}]}
        ).topics[0].partitions[0]

    try:
        for version in (4, 5, 6):
            answer = latest(version, -1)
            assert (answer.error_code, answer.offset, answer.leader_epoch) == (0, 5, 0)
        assert latest(6, 0).error_code == ErrorCode.NONE
        assert latest(6, 3).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH  # newer than the leader's
    finally:
        raw.close()


def test_describe_log_dirs_reports_partition_sizes(pykfk_broker):
    from kafka.admin import KafkaAdminClient

    producer = Producer({"bootstrap.servers": pykfk_broker.bootstrap})
    for _ in range(20):
        producer.produce("sized", b"x" * 1000, partition=0)
    assert producer.flush(10) == 0
    admin = KafkaAdminClient(bootstrap_servers=pykfk_broker.bootstrap)
    try:
        [report] = admin.describe_log_dirs()
    finally:
        admin.close()
    assert "sized" in repr(report) and "pykfk-data" in repr(report)  # the topic in the fixture's log dir
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        answer = raw.call(35, 4, {"topics": [{"topic": "sized", "partitions": [0]}]})
        everything = raw.call(35, 0, {"topics": None})
    finally:
        raw.close()
    [result] = answer.results
    assert answer.error_code == ErrorCode.NONE and result.total_bytes > result.usable_bytes > 0
    [topic] = result.topics
    [partition] = topic.partitions
    assert (topic.name, partition.partition_index, partition.offset_lag) == ("sized", 0, 0)
    assert partition.partition_size >= 20 * 1000
    assert "sized" in {t.name for r in everything.results for t in r.topics}


def test_list_offsets_v7_max_timestamp_and_v8_earliest_local(pykfk_broker):
    producer = Producer({"bootstrap.servers": pykfk_broker.bootstrap, "linger.ms": 0})
    base = 1_700_000_000_000
    for i, delta in enumerate([5, 9, 2, 9, 1]):
        producer.produce("stamped", f"v{i}".encode(), partition=0, timestamp=base + delta)
        producer.flush(10)  # one batch per record
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)

    def lookup(version: int, timestamp: int):
        return raw.call(LIST_OFFSETS, version, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "stamped", "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                "timestamp": timestamp}]}]}).topics[0].partitions[0]

    try:
        largest = lookup(7, -3)
        assert (largest.error_code, largest.timestamp, largest.offset) == (0, base + 9, 1)  # the first of the two
        assert (lookup(8, -4).offset, lookup(8, -2).offset) == (0, 0)
        empty = raw.call(LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": "stamped-empty", "partitions": [{"partition_index": 0, "timestamp": -3}]}]})
        assert empty.topics[0].partitions[0].error_code != 0 or empty.topics[0].partitions[0].offset == -1
    finally:
        raw.close()
