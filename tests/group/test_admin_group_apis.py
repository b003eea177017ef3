"""OffsetDelete and LeaveGroup v3+ (removing members by group.instance.id), driven by
kafka-python's admin client against a broker process, with groups made by
confluent-kafka consumers."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient, MemberToRemove

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient


def _committed(bootstrap: str, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([CkTopicPartition(t, p) for t, p in partitions], timeout=10)
    finally:
        consumer.close()
    return {(tp.topic, tp.partition): tp.offset for tp in found}


def _commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[CkTopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


@pytest.fixture
def topics(pykfk_broker):
    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    for future in admin.create_topics([NewTopic("left", 2, 1), NewTopic("kept", 1, 1)]).values():
        future.result(20)
    return pykfk_broker


def _error_codes(result: dict) -> dict[tuple[str, int], int]:
    return {(tp.topic, tp.partition): getattr(error, "errno", 0) or 0 for tp, error in result.items()}


def test_offset_delete_removes_an_empty_groups_offsets_of_the_named_partitions(topics):
    bootstrap = topics.bootstrap
    _commit(bootstrap, "tidy", {("left", 0): 5, ("left", 1): 7, ("kept", 0): 9})
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_group_offsets("tidy", [TopicPartition("left", 0), TopicPartition("left", 1)])
    finally:
        admin.close()
    assert _error_codes(result) == {("left", 0): 0, ("left", 1): 0}
    assert _committed(bootstrap, "tidy", [("left", 0), ("left", 1), ("kept", 0)]) == {
        ("left", 0): -1001, ("left", 1): -1001, ("kept", 0): 9}  # -1001: no committed offset


def test_offsets_of_subscribed_topics_stay_and_bad_names_get_kafkas_errors(topics):
    bootstrap = topics.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("left", b"v", partition=0)
    assert producer.flush(10) == 0
    _commit(bootstrap, "busy", {("left", 0): 1, ("kept", 0): 3})
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "busy", "enable.auto.commit": False,
                       "session.timeout.ms": 6000})
    member.subscribe(["left"])
    raw = RawClient(topics.host, topics.port)
    try:
        deadline = time.monotonic() + 20
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        answer = raw.call(47, 0, {"group_id": "busy", "topics": [
            {"name": "left", "partitions": [{"partition_index": 0}]},
            {"name": "kept", "partitions": [{"partition_index": 0}]},
            {"name": "nowhere", "partitions": [{"partition_index": 0}]},
            {"name": "kept", "partitions": [{"partition_index": 9}]}]})
        assert answer.error_code == ErrorCode.NONE
        codes = [(t.name, p.partition_index, p.error_code) for t in answer.topics for p in t.partitions]
        assert codes == [("left", 0, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC), ("kept", 0, ErrorCode.NONE),
                         ("nowhere", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                         ("kept", 9, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]
        unknown = raw.call(47, 0, {"group_id": "no-such-group", "topics": [
            {"name": "kept", "partitions": [{"partition_index": 0}]}]})
        assert unknown.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    finally:
        raw.close()
        member.close()
    assert _committed(bootstrap, "busy", [("left", 0), ("kept", 0)]) == {("left", 0): 1, ("kept", 0): -1001}


def test_leave_group_v3_removes_a_static_member_by_instance_id(topics):
    bootstrap = topics.bootstrap
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "statics", "group.instance.id": "host-a",
                       "session.timeout.ms": 60000, "enable.auto.commit": False})
    member.subscribe(["kept"])
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + 20
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        assert member.assignment()
        group = admin.describe_groups(["statics"])["statics"]
        assert [m["group_instance_id"] for m in group["members"]] == ["host-a"]
        removed = admin.remove_group_members("statics", [MemberToRemove(group_instance_id="host-a")])
        assert [error.__name__ for error in removed.values()] == ["NoError"]
        group = admin.describe_groups(["statics"])["statics"]
        assert group["members"] == [] and group["group_state"] == "Empty"
        unknown = admin.remove_group_members("statics", [MemberToRemove(group_instance_id="host-z")])
        assert [error.errno for error in unknown.values()] == [ErrorCode.UNKNOWN_MEMBER_ID]
    finally:
        admin.close()
        member.close()
