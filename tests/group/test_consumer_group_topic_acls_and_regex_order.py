"""KIP-848 heartbeats against a pykfk-broker process as Kafka 4.1 answers them: a
subscription naming a topic the member may not DESCRIBE is refused with
TOPIC_AUTHORIZATION_FAILED (raw heartbeats, and confluent-kafka with
``group.protocol=consumer``, which reports it to the application); a regular expression
matches only what the member may describe; and the topics a heartbeat names are assigned
at once while its regular expression's matches come in a later group epoch."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient, wait_until

pytestmark = pytest.mark.timeout(120)

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_alice="alice-pw";')
HEARTBEAT = 68
HEARTBEAT_INTERVAL_MS = 300


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(str(tmp_path_factory.mktemp("kip848acl") / "data"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "offsets.topic.num.partitions": 1, "group.consumer.heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    }).start()
    admin = AdminClient(_settings(process, "admin"))
    for future in admin.create_topics([NewTopic(name, 2, 1) for name in ("seen", "hidden", "lit", "rxo-a", "rxo-b",
                                                                         "acl-x", "acl-y")]).values():
        future.result(20)
    for kind, name, operation in [(ResourceType.GROUP, "*", AclOperation.READ),
                                  (ResourceType.TOPIC, "seen", AclOperation.DESCRIBE),
                                  (ResourceType.TOPIC, "seen", AclOperation.READ),
                                  (ResourceType.TOPIC, "acl-x", AclOperation.DESCRIBE)]:
        binding = AclBinding(kind, name, ResourcePatternType.LITERAL, "User:alice", "*", operation,
                             AclPermissionType.ALLOW)
        for future in admin.create_acls([binding], request_timeout=20).values():
            future.result(20)
    root = _raw(process, "admin")
    wait_until(lambda: root.call(10, 1, {"key": "any", "key_type": 0}).error_code == ErrorCode.NONE, 20,
               "the group coordinator")  # the first FindCoordinator creates __consumer_offsets
    root.close()
    yield process
    assert process.stop() == 0, process.log_tail()


def _settings(broker: BrokerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-pw"}


def _raw(broker: BrokerProcess, user: str) -> RawClient:
    raw = RawClient("127.0.0.1", broker.ports["SASL_PLAINTEXT"])
    raw.login_plain(user, f"{user}-pw")
    return raw


def _join(raw: RawClient, group: str, member_id: str, *, names=None, regex=None):
    return raw.call(HEARTBEAT, 1, {"group_id": group, "member_id": member_id, "member_epoch": 0,
                                   "rebalance_timeout_ms": 30_000, "subscribed_topic_names": names,
                                   "subscribed_topic_regex": regex, "topic_partitions": []})


def _beat(raw: RawClient, group: str, member_id: str, epoch: int, owned):
    return raw.call(HEARTBEAT, 1, {"group_id": group, "member_id": member_id, "member_epoch": epoch,
                                   "topic_partitions": owned})


def _topic_ids(raw: RawClient) -> dict[str, uuid.UUID]:
    metadata = raw.call(3, 12, {"topics": None, "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False})
    return {t.name: t.topic_id for t in metadata.topics}


def test_a_subscription_naming_a_topic_the_member_may_not_describe_is_refused(broker):
    alice = _raw(broker, "alice")
    try:
        refused = _join(alice, "acl-group", str(uuid.uuid4()), names=["seen", "hidden"])
        assert refused.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert "hidden" in refused.error_message and "seen" not in refused.error_message
        assert refused.member_epoch == 0 and refused.assignment is None
        joined = _join(alice, "acl-group", str(uuid.uuid4()), names=["seen"])
        assert joined.error_code == ErrorCode.NONE and joined.member_epoch >= 1
        assert [len(tp.partitions) for tp in joined.assignment.topic_partitions] == [2]
    finally:
        alice.close()


def test_a_regex_matches_only_topics_the_member_may_describe(broker):
    alice = _raw(broker, "alice")
    try:
        member = str(uuid.uuid4())
        joined = _join(alice, "acl-regex", member, regex="acl-.*")
        assert joined.error_code == ErrorCode.NONE
        epoch, owned = joined.member_epoch, []

        def assigned():
            nonlocal epoch, owned
            answer = _beat(alice, "acl-regex", member, epoch, owned)
            assert answer.error_code == ErrorCode.NONE
            epoch = answer.member_epoch
            if answer.assignment is not None:
                owned = [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)}
                         for tp in answer.assignment.topic_partitions]
            return owned

        wait_until(assigned, 10, "the regex's matches", interval=HEARTBEAT_INTERVAL_MS / 1000)
        admin = _raw(broker, "admin")
        ids = _topic_ids(admin)
        admin.close()
        assert [tp["topic_id"] for tp in owned] == [ids["acl-x"]]  # never acl-y
    finally:
        alice.close()


def test_confluent_kafka_reports_the_refused_subscription(broker):
    consumer = Consumer({**_settings(broker, "alice"), "group.id": "acl-confluent", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["seen", "hidden"])
        errors = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not errors:
            message = consumer.poll(0.2)
            if message is not None and message.error() is not None:
                errors.append(message.error())
        assert errors, "no error reached the application"
        assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors[0]
        assert consumer.assignment() == []
    finally:
        consumer.close()


def test_named_topics_come_first_and_the_regex_matches_in_a_later_epoch(broker):
    """Kafka resolves a regular expression after answering the heartbeat that brought it:
    the first answer assigns the named topic only; a later one, at a higher epoch, adds the
    regex's matches. (Assigning everything at once would fail the first assertion.)"""
    admin = _raw(broker, "admin")
    try:
        ids = _topic_ids(admin)
        member = str(uuid.uuid4())
        joined = _join(admin, "order-group", member, names=["lit"], regex="rxo-.*")
        assert joined.error_code == ErrorCode.NONE
        first_epoch = joined.member_epoch
        assert {tp.topic_id for tp in joined.assignment.topic_partitions} == {ids["lit"]}
        owned = [{"topic_id": tp.topic_id, "partitions": list(tp.partitions)}
                 for tp in joined.assignment.topic_partitions]

        def later():
            answer = _beat(admin, "order-group", member, first_epoch, owned)
            assert answer.error_code == ErrorCode.NONE
            return answer if answer.assignment is not None else None

        answer = wait_until(later, 10, "the regex's matches", interval=HEARTBEAT_INTERVAL_MS / 1000)
        assert answer.member_epoch > first_epoch
        assert {tp.topic_id for tp in answer.assignment.topic_partitions} == {ids["lit"], ids["rxo-a"], ids["rxo-b"]}
    finally:
        admin.close()
