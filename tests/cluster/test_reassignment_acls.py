"""ElectLeaders, AlterPartitionReassignments and ListPartitionReassignments are checked
like Kafka's: ALTER on the cluster for the first two, DESCRIBE for the listing, else
CLUSTER_AUTHORIZATION_FAILED (a standalone broker with the ACL authorizer and SASL
logins, raw requests)."""

from __future__ import annotations

import pytest

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')
ELECT, ALTER, LIST = 43, 45, 46
CLUSTER_RESOURCE, LITERAL, DESCRIBE, ALLOW = 4, 3, 8, 3


@pytest.fixture
def acl_broker(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
    }).start()
    yield broker
    broker.stop()


def login(broker: BrokerProcess, user: str) -> RawClient:
    raw = RawClient("127.0.0.1", broker.ports["SASL_PLAINTEXT"])
    assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    assert raw.call(36, 1, {"auth_bytes": f"\0{user}\0{user}-pw".encode()}).error_code == ErrorCode.NONE
    return raw


def ask_all(raw: RawClient) -> tuple[int, int, int, int]:
    """(ElectLeaders top-level, its partition's, AlterPartitionReassignments', ListPartitionReassignments') codes."""
    elect = raw.call(ELECT, 1, {"election_type": 0, "topic_partitions": [{"topic": "t", "partitions": [0]}],
                                "timeout_ms": 5000})
    alter = raw.call(ALTER, 0, {"timeout_ms": 5000, "topics": [
        {"name": "t", "partitions": [{"partition_index": 0, "replicas": [0]}]}]})
    listed = raw.call(LIST, 0, {"timeout_ms": 5000, "topics": None})
    return (elect.error_code, elect.replica_election_results[0].partition_result[0].error_code, alter.error_code,
            listed.error_code)


def test_cluster_alter_and_describe_are_needed(acl_broker):
    admin = login(acl_broker, "admin")
    try:
        created = admin.call(19, 1, {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                                                 "assignments": [], "configs": []}], "timeout_ms": 5000,
                                     "validate_only": False})
        assert created.topics[0].error_code == ErrorCode.NONE
        assert ask_all(admin) == (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED, ErrorCode.NONE, ErrorCode.NONE)
        granted = admin.call(30, 1, {"creations": [{"resource_type": CLUSTER_RESOURCE, "resource_name": "kafka-cluster",
                                                    "resource_pattern_type": LITERAL, "principal": "User:alice",
                                                    "host": "*", "operation": DESCRIBE, "permission_type": ALLOW}]})
        assert granted.results[0].error_code == ErrorCode.NONE
    finally:
        admin.close()
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    bob = login(acl_broker, "bob")
    try:
        assert ask_all(bob) == (refused, refused, refused, refused)
    finally:
        bob.close()
    alice = login(acl_broker, "alice")  # may describe the cluster, not alter it
    try:
        assert ask_all(alice) == (refused, refused, refused, ErrorCode.NONE)
    finally:
        alice.close()
