"""Raw requests at the newest versions Kafka 4.1 serves (Fetch 18, Metadata 13,
OffsetFetch 9, FindCoordinator 6, JoinGroup 9, LeaveGroup 5) against a pykfk-broker
process, and what each version means: topic ids and a top-level error in Metadata,
several groups and member checks in OffsetFetch, share coordinators in FindCoordinator, a
static leader that skips the assignment in JoinGroup, reasons in JoinGroup and LeaveGroup.
The clients (confluent-kafka, kafka-python) negotiate these versions in the other compat
tests."""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.errors import ErrorCode as E
from pykfk.server.dispatch import Registry
from pykfk.testing import BrokerProcess, RawClient, wait_until

pytestmark = pytest.mark.timeout(90)

FETCH, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 1, 3, 8, 9, 10
JOIN_GROUP, SYNC_GROUP, LEAVE_GROUP, HEARTBEAT_848 = 11, 14, 13, 68
KAFKA_41 = {FETCH: 18, METADATA: 13, OFFSET_FETCH: 9, FIND_COORDINATOR: 6, JOIN_GROUP: 9, LEAVE_GROUP: 5}
TOPIC = "v41"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(str(tmp_path_factory.mktemp("kafka41") / "data"), {
        "offsets.topic.num.partitions": 1, "group.initial.rebalance.delay.ms": 0,
        "share.coordinator.state.topic.num.partitions": 1,
    }).start()
    admin = AdminClient({"bootstrap.servers": process.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(20)
    producer = Producer({"bootstrap.servers": process.bootstrap})
    for i in range(5):
        producer.produce(TOPIC, f"r{i}".encode(), partition=0)
    assert producer.flush(20) == 0
    yield process
    assert process.stop() == 0, process.log_tail()


@pytest.fixture
def raw(broker):
    client = RawClient("127.0.0.1", broker.port)
    wait_until(lambda: client.call(FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": ["any"]})
               .coordinators[0].error_code == E.NONE, 20, "the group coordinator")
    yield client
    client.close()


def _topic_id(raw: RawClient) -> uuid.UUID:
    metadata = raw.call(METADATA, 13, {"topics": [{"topic_id": uuid.UUID(int=0), "name": TOPIC}],
                                       "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return metadata.topics[0].topic_id


def test_the_broker_advertises_kafka_41s_versions(raw):
    served = {k.api_key: k.max_version for k in raw.call(18, 4, {"client_software_name": "t",
                                                                 "client_software_version": "1"}).api_keys}
    assert {key: served[key] for key in KAFKA_41} == KAFKA_41
    assert {key: Registry.default().get(key).max_version for key in KAFKA_41} == KAFKA_41


def test_metadata_v13_names_topics_by_id_and_has_a_top_level_error(raw):
    metadata = raw.call(METADATA, 13, {"topics": None, "allow_auto_topic_creation": False,
                                       "include_topic_authorized_operations": True})
    assert metadata.error_code == E.NONE
    topic = next(t for t in metadata.topics if t.name == TOPIC)
    assert topic.error_code == E.NONE and topic.topic_id != uuid.UUID(int=0) and len(topic.partitions) == 2
    by_id = raw.call(METADATA, 13, {"topics": [{"topic_id": topic.topic_id, "name": None}],
                                    "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert [(t.name, t.error_code) for t in by_id.topics] == [(TOPIC, E.NONE)]
    missing = uuid.uuid4()
    unknown = raw.call(METADATA, 13, {"topics": [{"topic_id": missing, "name": None}],
                                      "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert [(t.topic_id, t.name, t.error_code) for t in unknown.topics] == [(missing, None, E.UNKNOWN_TOPIC_ID)]


def test_fetch_v18_reads_by_topic_id_with_the_new_tagged_fields(raw):
    topic_id = _topic_id(raw)
    body = {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20,
                 # Tagged (v17: the follower's directory, v18: its high watermark): a
                 # consumer may send them; they change nothing for it.
                 "replica_directory_id": uuid.uuid4(), "high_watermark": 0}]}]}
    fetched = raw.call(FETCH, 18, body)
    assert fetched.error_code == E.NONE
    [topic] = fetched.responses
    assert topic.topic_id == topic_id
    [partition] = topic.partitions
    assert (partition.error_code, partition.high_watermark, partition.last_stable_offset) == (E.NONE, 5, 5)
    assert len(bytes(partition.records)) > 0
    # An unknown topic id: UNKNOWN_TOPIC_ID, as from v13.
    other = uuid.uuid4()
    body["topics"][0]["topic_id"] = other
    refused = raw.call(FETCH, 18, body)
    assert [(t.topic_id, [p.error_code for p in t.partitions]) for t in refused.responses] == [
        (other, [E.UNKNOWN_TOPIC_ID])]


def _commit(raw: RawClient, group: str, offset: int, member_id: str = "", epoch: int = -1) -> int:
    answer = raw.call(OFFSET_COMMIT, 9, {"group_id": group, "generation_id_or_member_epoch": epoch,
                                         "member_id": member_id, "group_instance_id": None, "topics": [
                                             {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                                             "committed_leader_epoch": -1,
                                                                             "committed_metadata": "m"}]}]})
    return answer.topics[0].partitions[0].error_code


def _fetch_groups(raw: RawClient, groups: list[dict]) -> dict[str, tuple[int, dict[int, int]]]:
    answer = raw.call(OFFSET_FETCH, 9, {"groups": groups, "require_stable": True})
    return {g.group_id: (g.error_code, {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions})
            for g in answer.groups}


def test_offset_fetch_v9_answers_several_groups_and_checks_consumer_group_members(raw):
    assert _commit(raw, "of-a", 3) == E.NONE
    assert _commit(raw, "of-b", 4) == E.NONE
    topics = [{"name": TOPIC, "partition_indexes": [0, 1]}]
    assert _fetch_groups(raw, [{"group_id": "of-a", "topics": topics}, {"group_id": "of-b", "topics": None},
                               {"group_id": "of-none", "topics": topics}]) == {
        "of-a": (E.NONE, {0: 3, 1: -1}), "of-b": (E.NONE, {0: 4}), "of-none": (E.NONE, {0: -1, 1: -1})}
    # A consumer-protocol group: its member names itself and its epoch.
    member = str(uuid.uuid4())
    joined = raw.call(HEARTBEAT_848, 1, {"group_id": "of-848", "member_id": member, "member_epoch": 0,
                                         "rebalance_timeout_ms": 30_000, "subscribed_topic_names": [TOPIC],
                                         "subscribed_topic_regex": None, "topic_partitions": []})
    assert joined.error_code == E.NONE
    epoch = joined.member_epoch
    assert _commit(raw, "of-848", 2, member, epoch) == E.NONE

    def as_member(member_id, member_epoch):
        return _fetch_groups(raw, [{"group_id": "of-848", "member_id": member_id, "member_epoch": member_epoch,
                                    "topics": topics}])["of-848"]

    assert as_member(member, epoch) == (E.NONE, {0: 2, 1: -1})
    assert as_member(member, epoch + 1) == (E.STALE_MEMBER_EPOCH, {})
    assert as_member("someone-else", epoch) == (E.UNKNOWN_MEMBER_ID, {})
    assert as_member(None, -1) == (E.NONE, {0: 2, 1: -1})  # an admin client


def _kafka_uuid(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def test_find_coordinator_v6_finds_group_and_share_coordinators(raw, broker):
    answer = raw.call(FIND_COORDINATOR, 6, {"key_type": 0, "coordinator_keys": ["g1", "g2"]})
    assert [(c.key, c.error_code, c.node_id, c.port) for c in answer.coordinators] == [
        ("g1", E.NONE, 0, broker.port), ("g2", E.NONE, 0, broker.port)]
    good, bad = f"sg:{_kafka_uuid(_topic_id(raw))}:1", "sg:not-a-topic-id:1"
    share = raw.call(FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [good, bad]})
    assert [(c.key, c.error_code, c.port) for c in share.coordinators] == [
        (good, E.NONE, broker.port), (bad, E.INVALID_REQUEST, -1)]
    older = raw.call(FIND_COORDINATOR, 5, {"key_type": 2, "coordinator_keys": [good]})
    assert older.coordinators[0].error_code == E.INVALID_REQUEST


def _join(raw: RawClient, version: int, member_id: str = "", reason: str | None = None):
    return raw.call(JOIN_GROUP, version, {
        "group_id": f"static-v{version}", "session_timeout_ms": 30_000, "rebalance_timeout_ms": 30_000,
        "member_id": member_id, "group_instance_id": "instance-1", "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}], "reason": reason})


@pytest.mark.parametrize("version", [8, 9])
def test_a_static_leader_rejoining_a_stable_group_skips_the_assignment_from_v9(raw, broker, version):
    first = _join(raw, version, reason="starting up")
    assert first.error_code == E.NONE and first.leader == first.member_id and first.skip_assignment is False
    synced = raw.call(SYNC_GROUP, 5, {"group_id": f"static-v{version}", "generation_id": first.generation_id,
                                      "member_id": first.member_id, "group_instance_id": "instance-1",
                                      "protocol_type": "consumer", "protocol_name": "range",
                                      "assignments": [{"member_id": first.member_id, "assignment": b"a"}]})
    assert synced.error_code == E.NONE
    # The same instance restarts (no member id): it takes its place back, no rebalance.
    again = _join(raw, version, reason="restarted")
    assert again.error_code == E.NONE and again.generation_id == first.generation_id
    assert again.member_id != first.member_id and again.leader == first.member_id
    if version >= 9:  # KIP-814: the leader learns the members but must not assign
        assert again.skip_assignment is True
        assert [(m.member_id, m.group_instance_id, m.metadata) for m in again.members] == [
            (again.member_id, "instance-1", b"sub")]
    else:
        assert again.skip_assignment is False and again.members == []
    wait_until(lambda: "restarted" in broker.log_text(), 10, "the join reason in the broker's log")


def test_leave_group_v5_takes_each_members_reason(raw, broker):
    first = _join(raw, 9)
    left = raw.call(LEAVE_GROUP, 5, {"group_id": "static-v9", "members": [
        {"member_id": first.member_id, "group_instance_id": "instance-1", "reason": "shutting down for good"},
        {"member_id": "nobody", "group_instance_id": None, "reason": None}]})
    assert left.error_code == E.NONE
    assert [(m.member_id, m.error_code) for m in left.members] == [(first.member_id, E.NONE),
                                                                   ("nobody", E.UNKNOWN_MEMBER_ID)]
    wait_until(lambda: "shutting down for good" in broker.log_text(), 10, "the leave reason in the broker's log")


def test_a_v18_follower_behind_the_high_watermark_is_answered_at_once(raw):
    """KIP-1166: a follower says which high watermark it knows; when the leader's is
    ahead, its fetch is answered at once (no data needed) instead of waiting max_wait_ms."""
    topic_id = _topic_id(raw)

    def follower_fetch(known_high_watermark: int) -> tuple[float, int]:
        started = time.monotonic()
        answer = raw.call(FETCH, 18, {
            "replica_state": {"replica_id": 7, "replica_epoch": -1}, "max_wait_ms": 1000, "min_bytes": 1,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "forgotten_topics_data": [],
            "topics": [{"topic_id": topic_id, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 5, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20, "high_watermark": known_high_watermark}]}]})
        [partition] = answer.responses[0].partitions
        assert partition.error_code == E.NONE
        return time.monotonic() - started, partition.high_watermark

    behind, high_watermark = follower_fetch(2)
    assert high_watermark == 5 and behind < 0.5
    caught_up, _ = follower_fetch(5)  # nothing new to tell: it waits for data, as before
    assert caught_up >= 0.9
