"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a broker process:
consumers sharing one partition, RELEASE/REJECT, the delivery count limit, a consumer
killed while holding records; and hostile requests answered with Kafka's error codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient, free_port

HOLDER = str(Path(__file__).with_name("share_holder.py"))
LOCK_MS = 3000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    metrics_port = free_port()
    process = BrokerProcess(str(tmp_path_factory.mktemp("share") / "data"), overrides={
        "metrics.listener": f"http://127.0.0.1:{metrics_port}",
        "offsets.topic.num.partitions": 1,
        "group.share.min.record.lock.duration.ms": 1000,
        "group.share.record.lock.duration.ms": LOCK_MS,
        "group.share.delivery.count.limit": 3,
        "group.share.heartbeat.interval.ms": 500,
        "share.coordinator.state.topic.num.partitions": 2,
        "share.coordinator.state.topic.replication.factor": 1,
    })
    process.start()
    process.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    yield process
    assert process.stop() == 0, process.log_tail()


def _queue(broker: BrokerProcess, topic: str, group: str, records: int) -> None:
    """A one-partition topic holding ``records`` records and a share group that starts
    at its earliest record."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(records):
        producer.produce(topic, value=b"%d" % i)
        if i % 7 == 6:
            producer.flush(10)  # several batches
    assert producer.flush(10) == 0


def _consumer(broker: BrokerProcess, group: str, topic: str, **config: object) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **config})
    consumer.subscribe([topic])
    return consumer


def test_three_consumers_share_one_partition_each_record_to_one_of_them(broker):
    _queue(broker, "q3", "g3", 90)
    consumers = [_consumer(broker, "g3", "q3", **{"max.poll.records": 5}) for _ in range(3)]
    got: list[list[int]] = [[], [], []]
    deadline = time.monotonic() + 30
    while sum(map(len, got)) < 90 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            for message in consumer.poll(0.2) or []:
                assert message.error() is None, message.error()
                got[index].append(message.offset())
    for consumer in consumers:
        consumer.close()
    every = [offset for offsets in got for offset in offsets]
    assert sorted(every) == list(range(90))  # disjoint, and none lost
    assert all(got), [len(offsets) for offsets in got]


def test_release_redelivers_reject_does_not_and_the_delivery_limit_archives(broker):
    _queue(broker, "qr", "gr", 3)
    consumer = _consumer(broker, "gr", "qr", **{"share.acknowledgement.mode": "explicit"})
    deliveries: dict[int, list[int]] = {0: [], 1: [], 2: []}
    deadline = time.monotonic() + 20
    quiet_since = None
    while time.monotonic() < deadline:
        messages = consumer.poll(0.3) or []
        for message in messages:
            assert message.error() is None, message.error()
            offset = message.offset()
            deliveries[offset].append(message.delivery_count())
            if offset == 0:  # released every time: archived at the limit (3)
                consumer.acknowledge(message, AcknowledgeType.RELEASE)
            elif offset == 1:
                consumer.acknowledge(message, AcknowledgeType.REJECT)
            else:  # released once, then accepted
                consumer.acknowledge(message, AcknowledgeType.RELEASE if len(deliveries[2]) == 1
                                     else AcknowledgeType.ACCEPT)
        if messages:
            consumer.commit_sync()
            quiet_since = None
        elif len(deliveries[0]) >= 3:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 2:  # past the lock: nothing more comes
                break
    consumer.close()
    assert deliveries == {0: [1, 2, 3], 1: [1], 2: [1, 2]}
    page = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    labels = 'group="gr",partition="0",topic="qr"'
    for event, count in (("acquired", 6), ("acknowledged", 1), ("archived", 2), ("redelivered", 3)):
        assert f'kafka_sharegroup_records_total{{event="{event}",{labels}}} {count}.0' in page, event
    assert f"kafka_sharegroup_lag{{{labels}}} 0.0" in page


def test_records_held_by_a_killed_consumer_are_redelivered_after_their_lock(broker):
    _queue(broker, "qk", "gk", 20)
    holder = subprocess.Popen([sys.executable, HOLDER, broker.bootstrap, "gk", "qk"], stdout=subprocess.PIPE, text=True)
    try:
        line = holder.stdout.readline()  # the offsets it acquired and will never acknowledge
    finally:
        holder.kill()  # SIGKILL
        holder.wait(10)
    held = [int(x) for x in line.split()]
    assert held, "the holder received nothing"
    consumer = _consumer(broker, "gk", "qk")
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 20
    while len(seen) < 20 and time.monotonic() < deadline:
        for message in consumer.poll(0.3) or []:
            seen[message.offset()] = message.delivery_count()
    consumer.close()
    assert sorted(seen) == list(range(20))
    assert all(seen[offset] == 2 for offset in held)


def _find_coordinator(client: RawClient, group: str) -> None:
    for _ in range(50):  # the first FindCoordinator creates __consumer_offsets
        if client.call(10, 1, {"key": group, "key_type": 0}).error_code == ErrorCode.NONE:
            return
        time.sleep(0.1)


def _heartbeat(client: RawClient, group: str, member: str, epoch: int, topics: list[str] | None = None) -> dict:
    return client.call(76, 1, {"group_id": group, "member_id": member, "member_epoch": epoch,
                               "subscribed_topic_names": topics})


def _fetch(client: RawClient, group: str, member: str, epoch: int, topic_id, acks=()) -> dict:
    return client.call(78, 1, {
        "group_id": group, "member_id": member, "share_session_epoch": epoch, "max_wait_ms": 0, "min_bytes": 1,
        "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100,
        "topics": [{"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": list(acks)}]}],
        "forgotten_topics_data": []})


def test_hostile_share_requests_get_kafkas_error_codes(broker):
    _queue(broker, "qh", "gh", 5)
    client = RawClient(broker.host, broker.port)
    try:
        _find_coordinator(client, "gh")
        member = str(uuid.uuid4())
        assert _heartbeat(client, "gh", member, 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert _heartbeat(client, "gh", member, 0, None).error_code == ErrorCode.INVALID_REQUEST
        joined = _heartbeat(client, "gh", member, 0, ["qh"])
        assert joined.error_code == ErrorCode.NONE and joined.member_epoch > 0
        topic_id = joined.assignment.topic_partitions[0].topic_id
        assert _heartbeat(client, "gh", member, joined.member_epoch + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        # share sessions
        assert _fetch(client, "gh", member, 4, topic_id).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        accept_0 = {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}
        assert _fetch(client, "gh", member, 0, topic_id, [accept_0]).error_code == ErrorCode.INVALID_REQUEST
        first = _fetch(client, "gh", member, 0, topic_id)
        acquired = first.responses[0].partitions[0].acquired_records
        assert [(a.first_offset, a.last_offset, a.delivery_count) for a in acquired] == [(0, 4, 1)]
        assert _fetch(client, "gh", member, 7, topic_id).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # acknowledgements of what this member does not hold, or that make no sense
        other = RawClient(broker.host, broker.port)
        try:
            stranger = str(uuid.uuid4())
            assert _fetch(other, "gh", stranger, 0, topic_id).error_code == ErrorCode.NONE
            answer = _fetch(other, "gh", stranger, 1, topic_id, [accept_0])
            assert answer.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_RECORD_STATE
        finally:
            other.close()
        bad = [{"first_offset": 3, "last_offset": 1, "acknowledge_types": [1]}]
        answer = _fetch(client, "gh", member, 1, topic_id, bad)
        assert answer.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_REQUEST
        beyond = [{"first_offset": 4, "last_offset": 9, "acknowledge_types": [1]}]
        answer = client.call(79, 1, {"group_id": "gh", "member_id": member, "share_session_epoch": 2, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": beyond}]}]})
        assert answer.responses[0].partitions[0].error_code == ErrorCode.INVALID_RECORD_STATE
        all_five = [{"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}]
        answer = client.call(79, 1, {"group_id": "gh", "member_id": member, "share_session_epoch": 3, "topics": [
            {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": all_five}]}]})
        assert answer.error_code == ErrorCode.NONE and answer.responses[0].partitions[0].error_code == ErrorCode.NONE
        described = client.call(77, 1, {"group_ids": ["gh", "nope"], "include_authorized_operations": False})
        assert [m.member_id for m in described.groups[0].members] == [member]
        assert described.groups[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        listed = client.call(16, 5, {"states_filter": [], "types_filter": ["share"]})
        assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed.groups
                if g.group_id == "gh"] == [("gh", "share", "share", "Stable")]
        cli = [sys.executable, "-m", "pykfk.cli.main", "group"]
        env = {**os.environ, "PYKFK_BOOTSTRAP": broker.bootstrap}
        listed_rows = json.loads(subprocess.run([*cli, "list", "-o", "json"], env=env, capture_output=True,
                                                text=True, timeout=60, check=True).stdout)
        assert {"group": "gh", "state": "Stable", "members": 1, "protocol_type": "share"} in listed_rows
        shown = json.loads(subprocess.run([*cli, "describe", "gh", "-o", "json"], env=env, capture_output=True,
                                          text=True, timeout=60, check=True).stdout)
        assert (shown["protocol_type"], [m["member_id"] for m in shown["members"]]) == ("share", [member])
        assert shown["members"][0]["assignment"] == {"qh": [0]}
        alter_to_0 = {"group_id": "gh", "topics": [{"topic_name": "qh", "partitions": [
            {"partition_index": 0, "start_offset": 0}]}]}
        assert client.call(91, 0, alter_to_0).error_code == ErrorCode.NON_EMPTY_GROUP
        assert client.call(42, 2, {"groups_names": ["gh"]}).results[0].error_code == ErrorCode.NON_EMPTY_GROUP
        assert _heartbeat(client, "gh", member, -1).member_epoch == -1

        def start_offsets() -> list[tuple[int, int]]:
            answer = client.call(90, 0, {"groups": [{"group_id": "gh", "topics": [
                {"topic_name": "qh", "partitions": [0, 7]}]}]})
            return [(p.start_offset, p.error_code) for p in answer.groups[0].topics[0].partitions]

        assert start_offsets() == [(5, 0), (-1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)]  # 0-4 accepted
        altered = client.call(91, 0, alter_to_0)
        assert altered.error_code == ErrorCode.NONE and altered.responses[0].partitions[0].error_code == 0
        assert start_offsets()[0] == (0, 0)
        # The partition's leader takes the altered state at the group's next share session.
        _heartbeat(client, "gh", "m-again", 0, ["qh"])
        again = _fetch(client, "gh", "m-again", 0, topic_id).responses[0].partitions[0].acquired_records
        assert again and again[0].first_offset == 0 and again[0].delivery_count == 1
        assert _heartbeat(client, "gh", "m-again", -1).member_epoch == -1
        deleted = client.call(92, 0, {"group_id": "gh", "topics": [{"topic_name": "qh"}]})
        assert deleted.error_code == ErrorCode.NONE and deleted.responses[0].error_code == 0
        assert start_offsets()[0] == (-1, 0)
        # consumer byte-rate quotas apply to ShareFetch as to Fetch
        quota = client.call(49, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "slow"}],
                                                 "ops": [{"key": "consumer_byte_rate", "value": 10.0,
                                                          "remove": False}]}], "validate_only": False})
        assert quota.entries[0].error_code == ErrorCode.NONE
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce("qh", b"more")
        assert producer.flush(10) == 0
        slow = RawClient(broker.host, broker.port)
        try:
            body = {"group_id": "gh", "member_id": "slow-member", "share_session_epoch": 0, "max_wait_ms": 0,
                    "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100, "batch_size": 100, "topics": [
                        {"topic_id": topic_id, "partitions": [{"partition_index": 0, "acknowledgement_batches": []}]}],
                    "forgotten_topics_data": []}
            slow.send(78, 1, body, client_id="slow")
            _correlation, throttled = slow.recv(78, 1)
            assert throttled.responses[0].partitions[0].records
            assert throttled.throttle_time_ms > 0
        finally:
            slow.close()
        assert client.call(42, 2, {"groups_names": ["gh"]}).results[0].error_code == ErrorCode.NONE
        gone = client.call(77, 1, {"group_ids": ["gh"], "include_authorized_operations": False})
        assert gone.groups[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        assert start_offsets()[0] == (-1, 0)
    finally:
        client.close()


def test_read_committed_share_groups_never_get_aborted_records(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("qt", 1, 1)])["qt"].result(10)
    resource = ConfigResource(ConfigResource.Type.GROUP, "gt", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("share.isolation.level", "read_committed", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "share-txn"})
    producer.init_transactions(20)
    for count, commit in ((3, True), (2, False), (1, True)):  # offsets 0-2 +marker, 4-5 +marker, 7 +marker
        producer.begin_transaction()
        for i in range(count):
            producer.produce("qt", value=b"%d" % i)
        producer.flush(10)
        (producer.commit_transaction if commit else producer.abort_transaction)(20)
    client = RawClient(broker.host, broker.port)
    try:
        _find_coordinator(client, "gt")
        joined = _heartbeat(client, "gt", "m-t", 0, ["qt"])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        answer = _fetch(client, "gt", "m-t", 0, topic_id)
        acquired = answer.responses[0].partitions[0].acquired_records
        assert [(a.first_offset, a.last_offset) for a in acquired] == [(0, 2), (7, 7)]
        assert _fetch(client, "gt", "m-t", 1, topic_id).responses[0].partitions[0].acquired_records == []
    finally:
        client.close()


def test_a_groups_own_lock_duration_and_how_describe_groups_shows_a_share_group(broker):
    _queue(broker, "ql", "gl", 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def set_lock(value: str) -> None:
        resource = ConfigResource(ConfigResource.Type.GROUP, "gl", incremental_configs=[
            ConfigEntry("share.record.lock.duration.ms", value, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([resource])[resource].result(10)

    with pytest.raises(KafkaException) as below_minimum:  # group.share.min.record.lock.duration.ms is 1000
        set_lock("500")
    assert below_minimum.value.args[0].code() == ErrorCode.INVALID_CONFIG
    set_lock("1200")
    described = {}
    for group in ("gl", "other"):
        resource = ConfigResource(ConfigResource.Type.GROUP, group)
        described[group] = admin.describe_configs([resource])[resource].result(10)["share.record.lock.duration.ms"]
    assert (described["gl"].value, described["other"].value) == ("1200", str(LOCK_MS))  # the broker's default
    client = RawClient(broker.host, broker.port)
    try:
        _find_coordinator(client, "gl")
        topic_id = _heartbeat(client, "gl", "m-l", 0, ["ql"]).assignment.topic_partitions[0].topic_id
        first = _fetch(client, "gl", "m-l", 0, topic_id)
        assert first.acquisition_lock_timeout_ms == 1200
        assert [a.delivery_count for a in first.responses[0].partitions[0].acquired_records] == [1]
        time.sleep(1.4)  # past the group's lock, well inside the broker's 3 s
        again = _fetch(client, "gl", "m-l", 1, topic_id).responses[0].partitions[0].acquired_records
        assert [(a.first_offset, a.delivery_count) for a in again] == [(0, 2)]
        # DescribeGroups: a share group is not a classic group (Kafka's answer).
        old = client.call(15, 5, {"groups": ["gl"]}).groups[0]
        assert (old.error_code, old.group_state, list(old.members)) == (ErrorCode.NONE, "Dead", [])
        new = client.call(15, 6, {"groups": ["gl"]}).groups[0]
        assert (new.error_code, new.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group gl is not a classic group.")
    finally:
        client.close()


def test_the_share_state_apis_of_the_share_coordinator(broker):
    """InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState and
    DeleteShareGroupState (83-86) as another broker sends them; stale writers are fenced."""
    topic_id, key = uuid.uuid4(), {"group_id": "g-state"}
    client = RawClient(broker.host, broker.port)
    try:
        client.call(90, 0, {"groups": [{"group_id": "g-state", "topics": None}]})  # the state topic, made on first use

        def read(leader_epoch: int = 3):
            body = {**key, "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0,
                                                                              "leader_epoch": leader_epoch}]}]}
            return client.call(84, 0, body).results[0].partitions[0]

        def write(state_epoch: int, leader_epoch: int, start: int, batches=()) -> int:
            body = {**key, "topics": [{"topic_id": topic_id, "partitions": [{
                "partition": 0, "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
                "state_batches": [{"first_offset": f, "last_offset": last, "delivery_state": s, "delivery_count": c}
                                  for f, last, s, c in batches]}]}]}
            return client.call(85, 0, body).results[0].partitions[0].error_code

        assert (read().error_code, read().start_offset) == (ErrorCode.NONE, -1)  # no state yet
        init = {**key, "topics": [{"topic_id": topic_id, "partitions": [
            {"partition": 0, "state_epoch": 1, "start_offset": 10}]}]}
        assert client.call(83, 0, init).results[0].partitions[0].error_code == ErrorCode.NONE
        assert write(1, 3, 12, [(12, 13, 2, 1), (14, 20, 0, 2)]) == ErrorCode.NONE
        found = read()
        assert (found.state_epoch, found.start_offset) == (1, 12)
        assert [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in found.state_batches] == [
            (12, 13, 2, 1), (14, 20, 0, 2)]
        assert write(1, 2, 15) == ErrorCode.FENCED_LEADER_EPOCH  # a leader that lost the partition
        assert write(0, 3, 15) == ErrorCode.FENCED_STATE_EPOCH  # a state from before an offsets change
        assert read(leader_epoch=2).error_code == ErrorCode.FENCED_LEADER_EPOCH
        assert write(1, 3, -1) == ErrorCode.INVALID_REQUEST
        delete = {**key, "topics": [{"topic_id": topic_id, "partitions": [{"partition": 0}]}]}
        assert client.call(86, 0, delete).results[0].partitions[0].error_code == ErrorCode.NONE
        assert read().start_offset == -1
    finally:
        client.close()


def test_a_broker_restart_redelivers_only_unacknowledged_records(broker):
    """Runs last in this module: it restarts the module's broker."""
    _queue(broker, "qs", "gs", 12)
    consumer = _consumer(broker, "gs", "qs", **{"share.acknowledgement.mode": "explicit", "max.poll.records": 4})
    accepted: list[int] = []
    deadline = time.monotonic() + 20
    while len(accepted) < 6 and time.monotonic() < deadline:
        for message in consumer.poll(0.3) or []:
            if len(accepted) < 6:  # accept six, leave the rest acquired
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                accepted.append(message.offset())
            else:
                consumer.acknowledge(message, AcknowledgeType.RELEASE)
        consumer.commit_sync()
    assert len(accepted) == 6
    # A record whose lock runs out at the delivery limit (3) is archived, and stays so.
    _queue(broker, "qx", "gx", 1)
    raw = RawClient(broker.host, broker.port)
    try:
        _find_coordinator(raw, "gx")
        joined = _heartbeat(raw, "gx", "m-x", 0, ["qx"])
        topic_id = joined.assignment.topic_partitions[0].topic_id
        counts = []
        for epoch in range(4):
            answer = _fetch(raw, "gx", "m-x", epoch, topic_id)
            counts += [a.delivery_count for a in answer.responses[0].partitions[0].acquired_records]
            if epoch < 3:  # the fourth fetch finds the third lock run out
                time.sleep(LOCK_MS / 1000 + 0.2)
        assert counts == [1, 2, 3]
    finally:
        raw.close()
    broker.restart(clean=True)
    raw = RawClient(broker.host, broker.port)
    try:
        described = raw.call(90, 0, {"groups": [{"group_id": "gx", "topics": [
            {"topic_name": "qx", "partitions": [0]}]}]})
        assert described.groups[0].topics[0].partitions[0].start_offset == 1
    finally:
        raw.close()
    consumer.close()
    after = _consumer(broker, "gs", "qs")
    seen: list[int] = []
    deadline = time.monotonic() + 20
    quiet_since = None
    while time.monotonic() < deadline:
        messages = after.poll(0.3) or []
        seen += [m.offset() for m in messages]
        if messages or len(seen) < 6:
            quiet_since = None
        else:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > 2:
                break
    after.close()
    assert sorted(seen) == sorted(set(range(12)) - set(accepted))
