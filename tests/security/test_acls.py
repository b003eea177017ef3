"""The ACL authorizer end to end: principals from SASL logins, bindings created and
removed through confluent-kafka's admin client, Kafka's error codes per API, prefixed
patterns, Deny over Allow, super users, Metadata hiding topics."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    broker = BrokerProcess(str(tmp_path_factory.mktemp("acl") / "data"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "group.initial.rebalance.delay.ms": 0,
    }).start()
    yield broker
    broker.stop()


def _settings(broker: BrokerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-pw"}


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient(_settings(broker, "admin"))


def _allow(broker, *bindings: AclBinding) -> None:
    admin = _admin(broker)  # kept alive until the futures are done
    for future in admin.create_acls(list(bindings), request_timeout=20).values():
        future.result(20)


def _produce(broker, user: str, topic: str, count: int = 5) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    producer = Producer({**_settings(broker, user), "message.timeout.ms": 5000, "enable.idempotence": False})
    for i in range(count):
        producer.produce(topic, f"{user}-{i}".encode(), on_delivery=lambda err, _m: outcomes.append(err))
    producer.flush(20)
    return outcomes


def _raw(broker, user: str) -> RawClient:
    raw = RawClient("127.0.0.1", broker.ports["SASL_PLAINTEXT"])
    assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    assert raw.call(36, 1, {"auth_bytes": f"\0{user}\0{user}-pw".encode()}).error_code == ErrorCode.NONE
    return raw


def _end_offset(broker, topic: str) -> int:
    consumer = Consumer({**_settings(broker, "admin"), "group.id": "admin-peek"})
    from confluent_kafka import TopicPartition

    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_a_principal_without_acls_is_refused_and_nothing_is_stored(acl_broker):
    assert all(err is None for err in _produce(acl_broker, "admin", "guarded"))  # a super user may
    outcomes = _produce(acl_broker, "bob", "guarded")
    assert outcomes and all(err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for err in outcomes)
    assert _end_offset(acl_broker, "guarded") == 5
    raw = _raw(acl_broker, "bob")
    try:
        metadata = raw.call(3, 1, {"topics": None})
        assert [t.name for t in metadata.topics] == []  # bob may describe nothing
        named = raw.call(3, 1, {"topics": [{"name": "guarded"}]})
        assert named.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        fetch = raw.call(1, 4, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                "isolation_level": 0, "topics": [{"topic": "guarded", "partitions": [
                                    {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        partition = fetch.responses[0].partitions[0]
        assert partition.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and not partition.records
        offsets = raw.call(2, 1, {"replica_id": -1, "topics": [{"name": "guarded", "partitions": [
            {"partition_index": 0, "timestamp": -1}]}]})
        assert offsets.topics[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        created = raw.call(19, 1, {"topics": [{"name": "bobs", "num_partitions": 1, "replication_factor": 1,
                                               "assignments": [], "configs": []}], "timeout_ms": 5000,
                                   "validate_only": False})
        assert created.topics[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        deleted = raw.call(20, 1, {"topic_names": ["guarded"], "timeout_ms": 5000})
        assert deleted.responses[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        coordinator = raw.call(10, 1, {"key": "bobs-group", "key_type": 0})
        assert coordinator.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        producer_id = raw.call(22, 0, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert producer_id.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        acls = raw.call(29, 1, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1})
        assert acls.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        create_acl = raw.call(30, 1, {"creations": [{"resource_type": 2, "resource_name": "*",
                                                     "resource_pattern_type": 3, "principal": "User:bob",
                                                     "host": "*", "operation": 2, "permission_type": 3}]})
        assert create_acl.results[0].error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    finally:
        raw.close()
    admin = _admin(acl_broker)
    assert not admin.describe_acls(
        AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
                         AclPermissionType.ANY)).result(20)
    assert "bobs" not in admin.list_topics(timeout=10).topics


def _create_topics(broker, *names: str) -> None:
    from confluent_kafka.admin import NewTopic

    admin = _admin(broker)
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(20)


def test_prefixed_acls_deny_over_allow_and_consumer_groups(acl_broker):
    # Topics exist already: creating one (here: by auto-creation) would need CREATE.
    _create_topics(acl_broker, "orders-eu", "orders-secret", "other")
    _allow(acl_broker,
           AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:alice", "*",
                      AclOperation.WRITE, AclPermissionType.ALLOW),
           AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:alice", "*",
                      AclOperation.READ, AclPermissionType.ALLOW),
           AclBinding(ResourceType.TOPIC, "orders-secret", ResourcePatternType.LITERAL, "User:alice", "*",
                      AclOperation.ALL, AclPermissionType.DENY),
           AclBinding(ResourceType.GROUP, "alice-", ResourcePatternType.PREFIXED, "User:alice", "*",
                      AclOperation.READ, AclPermissionType.ALLOW))
    assert all(err is None for err in _produce(acl_broker, "alice", "orders-eu"))
    assert all(err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for err in _produce(acl_broker, "alice", "other"))
    assert all(err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
               for err in _produce(acl_broker, "alice", "orders-secret"))
    visible = set(AdminClient(_settings(acl_broker, "alice")).list_topics(timeout=10).topics)
    assert "orders-eu" in visible and not visible & {"guarded", "orders-secret", "other"}

    consumer = Consumer({**_settings(acl_broker, "alice"), "group.id": "alice-readers",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe(["orders-eu"])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"alice-{i}".encode() for i in range(5))

    errors: list[KafkaError] = []
    outsider = Consumer({**_settings(acl_broker, "alice"), "group.id": "not-alices",
                         "auto.offset.reset": "earliest", "error_cb": errors.append})
    outsider.subscribe(["orders-eu"])
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline:
            message = outsider.poll(0.5)
            if message is not None and message.error() is not None:
                errors.append(message.error())
            if errors:
                break
    finally:
        outsider.close()
    assert errors and errors[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def test_acls_are_described_deleted_and_kept_across_restarts(acl_broker):
    admin = _admin(acl_broker)
    binding = AclBinding(ResourceType.TOPIC, "audit", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.DESCRIBE, AclPermissionType.ALLOW)
    _allow(acl_broker, binding)
    acl_broker.restart()
    bob = AdminClient(_settings(acl_broker, "bob"))
    _produce(acl_broker, "admin", "audit", 1)
    assert "audit" in bob.list_topics(timeout=10).topics
    match = AclBindingFilter(ResourceType.TOPIC, "audit", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    assert admin.describe_acls(match).result(20) == [binding]
    deleted = admin.delete_acls([match])[match].result(20)
    assert deleted == [binding]
    assert "audit" not in bob.list_topics(timeout=10).topics


def test_without_an_authorizer_acl_apis_answer_security_disabled(secure_broker):
    raw = RawClient("127.0.0.1", secure_broker.ports["PLAINTEXT"])
    try:
        described = raw.call(29, 2, {"resource_type_filter": 1, "resource_name_filter": None,
                                     "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                     "operation": 1, "permission_type": 1})
        assert described.error_code == ErrorCode.SECURITY_DISABLED
    finally:
        raw.close()


def test_acl_apis_at_v0_speak_of_literal_bindings(acl_broker):
    """v0 has no pattern type: bindings created are LITERAL, filters match LITERAL."""
    raw = _raw(acl_broker, "admin")
    try:
        created = raw.call(30, 0, {"creations": [
            {"resource_type": 2, "resource_name": "v0-topic", "principal": "User:zed", "host": "*",
             "operation": 3, "permission_type": 3}]})
        assert [r.error_code for r in created.results] == [ErrorCode.NONE]
        described = raw.call(29, 0, {"resource_type_filter": 2, "resource_name_filter": "v0-topic",
                                     "principal_filter": None, "host_filter": None,
                                     "operation": 1, "permission_type": 1})
        assert described.error_code == ErrorCode.NONE
        assert [(r.resource_name, [(a.principal, a.operation) for a in r.acls]) for r in described.resources] == [
            ("v0-topic", [("User:zed", 3)])]
        deleted = raw.call(31, 0, {"filters": [{"resource_type_filter": 2, "resource_name_filter": "v0-topic",
                                                "principal_filter": None, "host_filter": None,
                                                "operation": 1, "permission_type": 1}]})
        assert [[m.resource_name for m in r.matching_acls] for r in deleted.filter_results] == [["v0-topic"]]
    finally:
        raw.close()
