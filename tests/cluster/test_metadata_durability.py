"""Metadata changes that cannot be made durable change nothing.

A standalone broker's metadata file lives in its first log dir: these tests put that dir
on a tmpfs of a few MiB mounted by the test (they run as root) and fill it with a file of
their own until writes fail, then delete the file to give the space back. A change asked
for meanwhile is refused with KAFKA_STORAGE_ERROR and is absent afterwards, in the
broker's answers and in the file; asked again once there is room, it is made whole.
Producer ids are never handed out from a block that was not saved, so producers started
after a restart never share an id with one acknowledged before it. The ZooKeeper store
is checked with znodes made read-only: ZooKeeper refuses the writes and the broker's view
stays as it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pykfk.cluster.embedded import METADATA_FILE, EmbeddedMetadataStore
from pykfk.cluster.metadata import BrokerInfo, MetadataWriteError
from pykfk.errors import ErrorCode
from pykfk.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType
from pykfk.security.credentials import scram_credential
from pykfk.security.quotas import entity_of
from pykfk.security.sasl import AuthenticationError
from pykfk.testing import BrokerProcess, RawClient, wait_until

BROKER = BrokerInfo(0, "127.0.0.1", 9092)

# API keys and the versions these tests speak.
METADATA, FIND_COORDINATOR, CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = 3, 10, 19, 20, 22
DESCRIBE_ACLS, CREATE_ACLS, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 29, 30, 32, 37
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS = 44, 48, 49
DESCRIBE_SCRAM, ALTER_SCRAM, DESCRIBE_PRODUCERS = 50, 51, 61
TOPIC, BROKER_RESOURCE = 2, 4  # DescribeConfigs/AlterConfigs resource types
SCRAM_SHA_256 = 1


@contextlib.contextmanager
def mounted_tmpfs(path: str, size: str) -> Iterator[str]:
    """A tmpfs of ``size`` at ``path``, unmounted on the way out."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", path], check=False).returncode != 0:
            subprocess.run(["umount", "-l", path], check=False)


def fill(directory: str) -> str:
    """Write a file into ``directory`` until the filesystem is full; returns its path.
    Called again, it takes whatever the broker freed meanwhile (a temp file it removed)."""
    path = os.path.join(directory, "filler")
    with open(path, "ab", buffering=0) as f:
        for block in (b"\0" * (1 << 20), b"\0" * 4096):
            for _ in range(1 << 16):
                try:
                    if f.write(block) < len(block):
                        break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return path


# -- the store alone ------------------------------------------------------------------


def _store_view(store: EmbeddedMetadataStore) -> dict[str, Any]:
    return {
        "topics": dict(store.topics()),
        "users": asyncio.run(store.scram_credentials()),
        "quotas": {entity: dict(values) for entity, values in store.client_quotas().items()},
        "quota_version": store.quota_version,
        "acls": store.acls(),
        "acl_version": store.acl_version,
        "broker_configs": dict(store.broker_configs("0")),
    }


def test_embedded_store_keeps_memory_and_file_as_they_were_when_a_save_fails(tmp_path):
    directory = str(tmp_path / "meta")
    with mounted_tmpfs(directory, "1m"):
        store = EmbeddedMetadataStore(directory, BROKER)
        asyncio.run(store.create_topic("kept", 2, 1, {"retention.ms": "1000"}))
        heard: list[tuple[str, Any]] = []
        store.add_listener(lambda kind, key: heard.append((kind, key)))
        before, saved = _store_view(store), (tmp_path / "meta" / METADATA_FILE).read_text()
        filler = fill(directory)
        reader = AclBinding(ResourceType.TOPIC, "kept", PatternType.LITERAL, "User:alice", "*", Operation.READ,
                            Permission.ALLOW)
        changes: list[Callable[[], Any]] = [
            lambda: store.create_topic("new", 1, 1, {}),
            lambda: store.delete_topic("kept"),
            lambda: store.create_partitions("kept", 4),
            lambda: store.alter_topic_configs("kept", {"retention.ms": "5"}),
            lambda: store.alter_scram_credentials("alice", {"SCRAM-SHA-256": "salt=c2FsdA==,iterations=4096"}, []),
            lambda: store.alter_client_quotas(entity_of({"user": "alice"}), {"producer_byte_rate": 1024.0}, []),
            lambda: store.create_acls([reader]),
            lambda: store.delete_acls([reader]),
            lambda: store.alter_broker_configs("0", {"log.retention.ms": "60000"}),
            # No id of a block that was not saved: asked twice, refused twice.
            store.allocate_producer_id,
            store.allocate_producer_id,
        ]
        for change in changes:
            with pytest.raises(MetadataWriteError) as refused:
                asyncio.run(change())
            assert refused.value.code == ErrorCode.KAFKA_STORAGE_ERROR
            assert _store_view(store) == before
        assert heard == []
        assert (tmp_path / "meta" / METADATA_FILE).read_text() == saved
        assert not os.path.exists(store.path + ".tmp")

        os.unlink(filler)
        first = [store.allocate_producer_id_now() for _ in range(3)]
        assert first == [0, 1, 2]
        asyncio.run(store.create_topic("new", 1, 1, {}))
        assert heard == [("topic", "new")]
        reopened = EmbeddedMetadataStore(directory, BROKER)
        assert sorted(reopened.topics()) == ["kept", "new"]
        assert reopened.allocate_producer_id_now() > max(first)


# -- a standalone broker on a full disk -------------------------------------------------


def _create_topic(raw: RawClient, name: str, partitions: int = 2) -> Any:
    return raw.call(CREATE_TOPICS, 5, {"topics": [{"name": name, "num_partitions": partitions,
                                                   "replication_factor": 1, "assignments": [], "configs": []}],
                                       "timeout_ms": 10000, "validate_only": False}).topics[0]


def _topics(raw: RawClient) -> dict[str, int]:
    """Topic name -> partition count, as the broker answers Metadata."""
    answer = raw.call(METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
    return {t.name: len(t.partitions) for t in answer.topics if t.error_code == 0}


def _init_producer_id(raw: RawClient) -> Any:
    return raw.call(INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                          "producer_id": -1, "producer_epoch": -1})


def _find_coordinator(raw: RawClient, group: str, key_type: int = 0) -> int:
    return raw.call(FIND_COORDINATOR, 3, {"key": group, "key_type": key_type}).error_code


def _alter_configs(raw: RawClient, resource_type: int, name: str, key: str, value: str) -> int:
    answer = raw.call(INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": resource_type, "resource_name": name,
         "configs": [{"name": key, "config_operation": 0, "value": value}]}], "validate_only": False})
    return answer.responses[0].error_code


def _config(raw: RawClient, resource_type: int, name: str, key: str) -> str | None:
    answer = raw.call(DESCRIBE_CONFIGS, 4, {"resources": [
        {"resource_type": resource_type, "resource_name": name, "configuration_keys": [key]}],
        "include_synonyms": False, "include_documentation": False})
    return next((c.value for c in answer.results[0].configs if c.name == key), None)


def _create_acl(raw: RawClient, topic: str) -> int:
    answer = raw.call(CREATE_ACLS, 2, {"creations": [
        {"resource_type": TOPIC, "resource_name": topic, "resource_pattern_type": 3, "principal": "User:alice",
         "host": "*", "operation": 3, "permission_type": 3}]})
    return answer.results[0].error_code


def _acl_principals(raw: RawClient) -> list[str]:
    answer = raw.call(DESCRIBE_ACLS, 2, {"resource_type_filter": 1, "resource_name_filter": None,
                                         "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                                         "operation": 1, "permission_type": 1})
    return [acl.principal for resource in answer.resources for acl in resource.acls]


def _set_scram(raw: RawClient, user: str) -> int:
    answer = raw.call(ALTER_SCRAM, 0, {"deletions": [], "upsertions": [
        {"name": user, "mechanism": SCRAM_SHA_256, "iterations": 4096, "salt": b"salt-of-" + user.encode(),
         "salted_password": b"\x01" * 32}]})
    return answer.results[0].error_code


def _scram_users(raw: RawClient) -> list[str]:
    answer = raw.call(DESCRIBE_SCRAM, 0, {"users": None})
    return [r.user for r in answer.results if r.error_code == 0]


def _set_quota(raw: RawClient, user: str) -> int:
    answer = raw.call(ALTER_CLIENT_QUOTAS, 1, {"entries": [
        {"entity": [{"entity_type": "user", "entity_name": user}],
         "ops": [{"key": "producer_byte_rate", "value": 1048576.0, "remove": False}]}], "validate_only": False})
    return answer.entries[0].error_code


def _quota_users(raw: RawClient) -> list[str | None]:
    answer = raw.call(DESCRIBE_CLIENT_QUOTAS, 1, {"components": [{"entity_type": "user", "match_type": 2,
                                                                   "match": None}], "strict": False})
    return [e.entity_name for entry in answer.entries for e in entry.entity]


def _producer_ids(raw: RawClient, topic: str) -> list[int]:
    answer = raw.call(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
    return sorted(p.producer_id for p in answer.topics[0].partitions[0].active_producers)


def _produce(bootstrap: str, topic: str, values: list[bytes], *, idempotent: bool, timeout: float = 20) -> None:
    """Every value acknowledged (acks=all) by partition 0 of ``topic``, or AssertionError."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": idempotent, "acks": "all",
                         "message.timeout.ms": int(timeout * 1000), "retry.backoff.ms": 100})
    failures: list[Any] = []
    for value in values:
        producer.produce(topic, value, partition=0, on_delivery=lambda err, _msg: err and failures.append(err))
    assert producer.flush(timeout + 5) == 0
    assert failures == []


def _values(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    """Every record of ``topic``, read from the beginning to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values, ended, deadline = [], set(), time.monotonic() + 20
        while len(ended) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                ended.add(message.partition())
            else:
                values.append(message.value())
        assert len(ended) == partitions, "not every partition read to its end"
        return sorted(values)
    finally:
        consumer.close()


def _commit_offsets(bootstrap: str, group: str, topic: str) -> int:
    """The committed offset of partition 0 after a consumer of a new group commits 1."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def _assert_logged_once_each(text: str, phrase: str, at_least: int) -> None:
    """Each refused change logged in a line with ``phrase``, none with a traceback, and
    no connection closed for a failed handler."""
    lines = text.splitlines()
    refused = [i for i, line in enumerate(lines) if phrase in line]
    assert len(refused) >= at_least, refused
    assert not any(lines[i + 1].startswith("Traceback") for i in refused if i + 1 < len(lines))
    assert "request handler failed" not in text


def test_standalone_broker_on_a_full_disk_refuses_changes_whole_and_never_reuses_producer_ids(tmp_path):
    data = str(tmp_path / "data")
    with mounted_tmpfs(data, "24m"):
        broker = BrokerProcess(data, {
            "offsets.topic.num.partitions": 1, "log.segment.bytes": 1 << 20, "log.dir.free.bytes.min": 1 << 20,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS",
        }).start()
        try:
            # Before the fault: a topic with records from a producer without an id, so
            # no block of producer ids exists yet.
            raw = RawClient(broker.host, broker.port)
            assert _create_topic(raw, "before").error_code == 0
            _produce(broker.bootstrap, "before", [b"before-0", b"before-1"], idempotent=False)

            filler = fill(data)
            # During the fault every change is refused whole and the connection stays up
            # (the disk topped up before each: the broker may free a page meanwhile).
            storage_error = ErrorCode.KAFKA_STORAGE_ERROR
            refused: list[tuple[Callable[[], Any], int]] = [
                (lambda: _create_topic(raw, "during").error_code, storage_error),
                (lambda: raw.call(DELETE_TOPICS, 4, {"topic_names": ["before"], "timeout_ms": 10000}
                                  ).responses[0].error_code, storage_error),
                (lambda: raw.call(CREATE_PARTITIONS, 1, {"topics": [{"name": "before", "count": 3,
                                                                     "assignments": None}],
                                                         "timeout_ms": 10000, "validate_only": False}
                                  ).results[0].error_code, storage_error),
                (lambda: _alter_configs(raw, TOPIC, "before", "retention.ms", "123456"), storage_error),
                (lambda: _alter_configs(raw, BROKER_RESOURCE, "0", "log.retention.ms", "654321"), storage_error),
                (lambda: _create_acl(raw, "before"), storage_error),
                (lambda: _set_scram(raw, "alice"), storage_error),
                (lambda: _set_quota(raw, "alice"), storage_error),
                # A new group's coordinator needs __consumer_offsets, which cannot be made.
                (lambda: _find_coordinator(raw, "fresh-group"), ErrorCode.COORDINATOR_NOT_AVAILABLE),
                # Nor __transaction_state, for a transactional id's coordinator.
                (lambda: _find_coordinator(raw, "txn-id", key_type=1), ErrorCode.COORDINATOR_NOT_AVAILABLE),
                # No producer id from a block that was not saved, however often asked.
                (lambda: _init_producer_id(raw).error_code, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
                (lambda: _init_producer_id(raw).error_code, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
            ]
            for request, code in refused:
                fill(data)
                assert request() == code
            assert _topics(raw) == {"before": 2}
            assert _config(raw, TOPIC, "before", "retention.ms") != "123456"
            assert _config(raw, BROKER_RESOURCE, "0", "log.retention.ms") != "654321"
            assert (_acl_principals(raw), _scram_users(raw), _quota_users(raw)) == ([], [], [])

            # A producer started during the fault gets its id once there is room again.
            early = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                              "message.timeout.ms": 30000})
            early_failures: list[Any] = []
            early.produce("before", b"early", partition=0,
                          on_delivery=lambda err, _msg: err and early_failures.append(err))
            early.poll(1.0)
            os.unlink(filler)
            assert early.flush(30) == 0 and early_failures == []
            del early

            # With room again the same changes succeed, whole.
            assert _create_topic(raw, "during").error_code == 0
            _produce(broker.bootstrap, "during", [b"during-0"], idempotent=False)
            assert _alter_configs(raw, TOPIC, "before", "retention.ms", "123456") == 0
            assert _alter_configs(raw, BROKER_RESOURCE, "0", "log.retention.ms", "654321") == 0
            assert (_create_acl(raw, "before"), _set_scram(raw, "alice"), _set_quota(raw, "alice")) == (0, 0, 0)
            assert _commit_offsets(broker.bootstrap, "fresh-group", "before") == 1
            raw.close()

            broker.restart(clean=False)  # kill -9
            # Two producers after the restart: ids of their own, every record kept.
            _produce(broker.bootstrap, "before", [b"second"], idempotent=True)
            _produce(broker.bootstrap, "before", [b"third"], idempotent=True)
            raw = RawClient(broker.host, broker.port)
            try:
                producer_ids = _producer_ids(raw, "before")
                assert len(producer_ids) == 3, producer_ids
                assert _topics(raw) == {"before": 2, "during": 2, "__consumer_offsets": 1}
                assert _config(raw, TOPIC, "before", "retention.ms") == "123456"
                assert _config(raw, BROKER_RESOURCE, "0", "log.retention.ms") == "654321"
                assert (_acl_principals(raw), _scram_users(raw), _quota_users(raw)) == (
                    ["User:alice"], ["alice"], ["alice"])
            finally:
                raw.close()
            assert _values(broker.bootstrap, "before", 2) == sorted(
                [b"before-0", b"before-1", b"early", b"second", b"third"])
            assert _values(broker.bootstrap, "during", 2) == [b"during-0"]
            with open(os.path.join(data, METADATA_FILE), encoding="utf-8") as f:
                assert json.load(f)["topics"]["before"]["partitions"] == 2
            _assert_logged_once_each(broker.log_text(), "metadata not saved", 12)
        finally:
            broker.stop()


# -- ZooKeeper refusing the writes ---------------------------------------------------------


def test_zookeeper_store_keeps_its_view_when_zookeeper_refuses_a_change(cluster_factory):
    from kazoo.security import OPEN_ACL_UNSAFE, make_acl

    cluster = cluster_factory(1, authorizer_class_name="kafka.security.authorizer.AclAuthorizer",
                              super_users="User:ANONYMOUS", offsets_topic_num_partitions=1,
                              offsets_topic_replication_factor=1)
    broker = cluster.brokers[0]
    raw = RawClient(broker.host, broker.port)
    try:
        assert _create_topic(raw, "zk-before").error_code == 0
        read_only = [make_acl("world", "anyone", read=True, admin=True)]  # admin: to open it again
        cluster.zk.create(cluster.path("/latest_producer_id_block"),
                          b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}', acl=read_only)
        frozen = [cluster.path(p) for p in ("/brokers/topics", "/brokers/topics/zk-before", "/config/topics/zk-before",
                                            "/config/brokers", "/config/users", "/kafka-acl", "/admin/delete_topics",
                                            "/latest_producer_id_block")]
        for path in frozen:
            cluster.zk.set_acls(path, read_only)

        refused = ErrorCode.UNKNOWN_SERVER_ERROR
        assert _create_topic(raw, "zk-during").error_code == refused
        assert raw.call(DELETE_TOPICS, 4, {"topic_names": ["zk-before"], "timeout_ms": 10000}
                        ).responses[0].error_code == refused
        assert raw.call(CREATE_PARTITIONS, 1, {"topics": [{"name": "zk-before", "count": 3, "assignments": None}],
                                               "timeout_ms": 10000, "validate_only": False}
                        ).results[0].error_code == refused
        assert _alter_configs(raw, TOPIC, "zk-before", "retention.ms", "123456") == refused
        assert _alter_configs(raw, BROKER_RESOURCE, "0", "log.retention.ms", "654321") == refused
        assert (_create_acl(raw, "zk-before"), _set_scram(raw, "alice"), _set_quota(raw, "alice")) == (
            refused, refused, refused)
        assert _find_coordinator(raw, "zk-group") == ErrorCode.COORDINATOR_NOT_AVAILABLE
        answer = _init_producer_id(raw)
        assert (answer.error_code, answer.producer_id) == (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, -1)
        # The broker's view is what it was, on the connection that asked.
        assert _topics(raw) == {"zk-before": 2}
        assert _config(raw, TOPIC, "zk-before", "retention.ms") != "123456"
        assert _config(raw, BROKER_RESOURCE, "0", "log.retention.ms") != "654321"
        assert (_acl_principals(raw), _scram_users(raw), _quota_users(raw)) == ([], [], [])

        for path in frozen:
            cluster.zk.set_acls(path, OPEN_ACL_UNSAFE)
        assert _create_topic(raw, "zk-during").error_code == 0
        assert _alter_configs(raw, TOPIC, "zk-before", "retention.ms", "123456") == 0
        assert _alter_configs(raw, BROKER_RESOURCE, "0", "log.retention.ms", "654321") == 0
        assert (_create_acl(raw, "zk-before"), _set_scram(raw, "alice"), _set_quota(raw, "alice")) == (0, 0, 0)
        answer = _init_producer_id(raw)
        assert (answer.error_code, answer.producer_id) == (0, 1000)  # the block after the one stored
        wait_until(lambda: _find_coordinator(raw, "zk-group") == 0, 20, "a coordinator for zk-group")
        assert _topics(raw) == {"zk-before": 2, "zk-during": 2, "__consumer_offsets": 1}
        assert _config(raw, TOPIC, "zk-before", "retention.ms") == "123456"
        assert _config(raw, BROKER_RESOURCE, "0", "log.retention.ms") == "654321"
        assert (_acl_principals(raw), _scram_users(raw), _quota_users(raw)) == (["User:alice"], ["alice"], ["alice"])
    finally:
        raw.close()
    _assert_logged_once_each(broker.log_text(), "nothing changed: ZooKeeper refused it", 9)


class _UnreachableStore:
    """A store whose reads fail as the ZooKeeper store's do when ZooKeeper is down."""

    async def scram_credentials(self, users: list[str] | None = None) -> dict[str, dict[str, str]]:
        raise MetadataWriteError(ErrorCode.REQUEST_TIMED_OUT, "ZooKeeper could not be reached (TimeoutError)")


def test_a_login_whose_credentials_cannot_be_read_fails_with_the_reason():
    with pytest.raises(AuthenticationError, match="alice could not be read: ZooKeeper could not be reached"):
        asyncio.run(scram_credential(_UnreachableStore(), "alice", "SCRAM-SHA-256"))
