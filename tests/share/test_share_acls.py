"""Share groups under ACLs, as Kafka checks them: READ on the group for
ShareGroupHeartbeat and ShareFetch, DESCRIBE on the subscribed topics, READ on the
topics fetched from."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
        'user_admin="admin-pw" user_alice="alice-pw";')


def _settings(broker: BrokerProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-pw"}


def _raw(broker: BrokerProcess, user: str) -> RawClient:
    raw = RawClient("127.0.0.1", broker.ports["SASL_PLAINTEXT"])
    assert raw.call(17, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.NONE
    assert raw.call(36, 1, {"auth_bytes": f"\0{user}\0{user}-pw".encode()}).error_code == ErrorCode.NONE
    return raw


def _allow(admin: AdminClient, kind: ResourceType, name: str, operation: AclOperation) -> None:
    binding = AclBinding(kind, name, ResourcePatternType.LITERAL, "User:alice", "*", operation,
                         AclPermissionType.ALLOW)
    for future in admin.create_acls([binding], request_timeout=20).values():
        future.result(20)


def test_share_requests_need_group_read_and_topic_describe_and_read(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "offsets.topic.num.partitions": 1, "share.coordinator.state.topic.num.partitions": 1,
    }).start()
    try:
        admin = AdminClient(_settings(broker, "admin"))
        admin.create_topics([NewTopic("qa", 1, 1)])["qa"].result(10)
        earliest = ConfigResource(ConfigResource.Type.GROUP, "ga", incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([earliest])[earliest].result(10)
        producer = Producer(_settings(broker, "admin"))
        producer.produce("qa", b"x")
        assert producer.flush(10) == 0
        root = _raw(broker, "admin")
        for _ in range(50):  # the first FindCoordinator creates __consumer_offsets
            if root.call(10, 1, {"key": "ga", "key_type": 0}).error_code == ErrorCode.NONE:
                break
            time.sleep(0.1)
        root.close()
        alice = _raw(broker, "alice")

        def heartbeat(epoch: int = 0):
            return alice.call(76, 1, {"group_id": "ga", "member_id": "m-alice", "member_epoch": epoch,
                                      "subscribed_topic_names": ["qa"] if epoch == 0 else None})

        def fetch(epoch: int, topic_id):
            return alice.call(78, 1, {
                "group_id": "ga", "member_id": "m-alice", "share_session_epoch": epoch, "max_wait_ms": 0,
                "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10, "batch_size": 10,
                "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0,
                                                                  "acknowledgement_batches": []}]}],
                "forgotten_topics_data": []})

        assert heartbeat().error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        altered = alice.call(44, 1, {"resources": [{"resource_type": 32, "resource_name": "ga", "configs": [
            {"name": "share.auto.offset.reset", "config_operation": 0, "value": "latest"}]}], "validate_only": False})
        assert altered.responses[0].error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        _allow(admin, ResourceType.GROUP, "ga", AclOperation.READ)
        assert heartbeat().error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        _allow(admin, ResourceType.TOPIC, "qa", AclOperation.DESCRIBE)
        joined = heartbeat()
        assert joined.error_code == ErrorCode.NONE
        topic_id = joined.assignment.topic_partitions[0].topic_id
        denied = fetch(0, topic_id)
        assert denied.responses[0].partitions[0].error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        assert not denied.responses[0].partitions[0].acquired_records
        _allow(admin, ResourceType.TOPIC, "qa", AclOperation.READ)
        allowed = fetch(1, topic_id)
        partition = allowed.responses[0].partitions[0]
        assert partition.error_code == ErrorCode.NONE
        assert [(a.first_offset, a.last_offset) for a in partition.acquired_records] == [(0, 0)]
        alice.close()
    finally:
        broker.stop()
