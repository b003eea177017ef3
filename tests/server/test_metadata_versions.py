"""Metadata at today's versions: topic ids (v10+), a topic named by its id alone (v12),
authorized operations (v8+), and confluent-kafka's admin client reading them."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient

METADATA = 3


def test_topic_ids_and_lookup_by_id(pykfk_broker):
    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    admin.create_topics([NewTopic("ided", 2, 1)])["ided"].result(20)
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        by_name = raw.call(METADATA, 12, {"topics": [{"name": "ided"}], "allow_auto_topic_creation": False})
        [topic] = by_name.topics
        assert topic.error_code == ErrorCode.NONE and topic.topic_id != uuid.UUID(int=0)
        assert len(topic.partitions) == 2

        by_id = raw.call(METADATA, 12, {"topics": [{"topic_id": topic.topic_id, "name": None}],
                                         "allow_auto_topic_creation": False})
        assert [(t.name, t.topic_id, t.error_code) for t in by_id.topics] == [("ided", topic.topic_id, 0)]

        stranger = uuid.uuid4()
        unknown = raw.call(METADATA, 12, {"topics": [{"topic_id": stranger, "name": None}],
                                           "allow_auto_topic_creation": False})
        assert [(t.topic_id, t.error_code) for t in unknown.topics] == [(stranger, ErrorCode.UNKNOWN_TOPIC_ID)]

        # Every version from 0 answers the same topic (v0-v9 without the id).
        for version in range(13):
            answer = raw.call(METADATA, version, {"topics": [{"name": "ided"}], "allow_auto_topic_creation": False})
            assert [t.name for t in answer.topics] == ["ided"], version
    finally:
        raw.close()


def test_authorized_operations_when_asked(pykfk_broker):
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        asked = raw.call(METADATA, 10, {"topics": [{"name": "ops"}], "allow_auto_topic_creation": True,
                                         "include_cluster_authorized_operations": True,
                                         "include_topic_authorized_operations": True})
        not_asked = raw.call(METADATA, 10, {"topics": [{"name": "ops"}], "allow_auto_topic_creation": True})
    finally:
        raw.close()
    # Without an authorizer everything is allowed: READ (3) .. ALTER_CONFIGS (11) on topics.
    topic_ops = {op for op in range(32) if asked.topics[0].topic_authorized_operations & (1 << op)}
    assert topic_ops == {3, 4, 5, 6, 7, 8, 10, 11}
    assert asked.cluster_authorized_operations & (1 << 8)  # DESCRIBE
    assert not_asked.topics[0].topic_authorized_operations == -2147483648


def test_confluent_describe_topics_and_cluster_carry_authorized_operations(pykfk_broker):
    from confluent_kafka import TopicCollection

    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    admin.create_topics([NewTopic("seen", 1, 1)])["seen"].result(20)
    described = admin.describe_topics(TopicCollection(["seen"]), include_authorized_operations=True)["seen"].result(20)
    assert described.name == "seen" and len(described.partitions) == 1
    assert AclOperation.READ in described.authorized_operations
    cluster = admin.describe_cluster(include_authorized_operations=True).result(20)
    assert AclOperation.DESCRIBE in cluster.authorized_operations


def test_describe_topic_partitions_pages_through_partitions_with_a_cursor(pykfk_broker):
    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    for future in admin.create_topics([NewTopic("paged-a", 5, 1), NewTopic("paged-b", 3, 1)]).values():
        future.result(20)
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    seen, cursor, pages = [], None, 0
    try:
        while pages < 10:
            answer = raw.call(75, 0, {"topics": [{"name": "paged-b"}, {"name": "paged-a"}, {"name": "nowhere"}],
                                      "response_partition_limit": 3, "cursor": cursor})
            pages += 1
            for topic in answer.topics:
                seen += [(topic.name, topic.error_code, p.partition_index, p.leader_id) for p in topic.partitions]
                if topic.error_code:
                    seen.append((topic.name, topic.error_code))
            cursor = answer.next_cursor
            if cursor is None:
                break
        bad_cursor = raw.call(75, 0, {"topics": [{"name": "paged-a"}], "response_partition_limit": 3,
                                      "cursor": {"topic_name": "elsewhere", "partition_index": 0}})
    finally:
        raw.close()
    assert pages == 3  # 8 partitions, 3 a page
    # In name order: the unknown topic first, then every partition once, across pages.
    assert seen == [("nowhere", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)] + [
        ("paged-a", 0, p, 0) for p in range(5)] + [("paged-b", 0, p, 0) for p in range(3)]
    assert bad_cursor.topics[0].error_code == ErrorCode.INVALID_REQUEST
