"""Topic ids (KIP-516) in Fetch v13+: topics named by id, UNKNOWN_TOPIC_ID for ids no
topic has, and a topic deleted and made again under the same name is another topic: a
fetch session holding the old id never reads the new topic's records, and a running
confluent-kafka consumer never reads them as the continuation of the old ones."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient

FETCH, METADATA = 1, 3


def _topic_id(raw: RawClient, name: str) -> uuid.UUID:
    answer = raw.call(METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    return answer.topics[0].topic_id


def _fetch(raw: RawClient, topic_id: uuid.UUID, session_id: int = 0, epoch: int = -1, offset: int = 0,
           partitions: bool = True):
    topics = [{"topic_id": topic_id, "partitions": [
        {"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset, "log_start_offset": -1,
         "partition_max_bytes": 1 << 20}]}] if partitions else []
    return raw.call(FETCH, 13, {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                "isolation_level": 0, "session_id": session_id, "session_epoch": epoch,
                                "topics": topics, "forgotten_topics_data": [], "rack_id": ""})


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value, partition=0)
    assert producer.flush(10) == 0


def _recreate(admin: AdminClient, raw: RawClient, name: str, old: uuid.UUID, deleted: bool = False) -> None:
    if not deleted:
        admin.delete_topics([name])[name].result(20)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            admin.create_topics([NewTopic(name, 1, 1)])[name].result(20)
            break
        except Exception:  # noqa: BLE001 - deletion still finishing: bounded retry
            time.sleep(0.2)
    assert _topic_id(raw, name) != old


def test_fetch_v13_by_id_and_a_session_across_a_recreated_topic(pykfk_broker):
    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    admin.create_topics([NewTopic("ids", 1, 1)])["ids"].result(20)
    _produce(pykfk_broker.bootstrap, "ids", [b"old-%d" % i for i in range(3)])
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        old = _topic_id(raw, "ids")
        full = _fetch(raw, old)
        [topic] = full.responses
        assert (topic.topic_id, topic.partitions[0].error_code, topic.partitions[0].high_watermark) == (old, 0, 3)
        assert topic.partitions[0].records

        stranger = uuid.uuid4()
        [missing] = _fetch(raw, stranger).responses
        assert (missing.topic_id, missing.partitions[0].error_code) == (stranger, ErrorCode.UNKNOWN_TOPIC_ID)

        opened = _fetch(raw, old, session_id=0, epoch=0, offset=3)
        assert opened.session_id != 0
        _recreate(admin, raw, "ids", old)
        _produce(pykfk_broker.bootstrap, "ids", [b"new-%d" % i for i in range(5)])
        later = _fetch(raw, old, session_id=opened.session_id, epoch=1, partitions=False)
        assert [(t.topic_id, [(p.error_code, bool(p.records)) for p in t.partitions]) for t in later.responses] == [
            (old, [(ErrorCode.UNKNOWN_TOPIC_ID, False)])]
    finally:
        raw.close()


def test_a_running_consumer_never_reads_the_new_topic_as_the_old_one(pykfk_broker):
    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    admin.create_topics([NewTopic("reborn", 1, 1)])["reborn"].result(20)
    _produce(pykfk_broker.bootstrap, "reborn", [b"old-%d" % i for i in range(10)])
    # Commits are made by hand while the old topic exists: librdkafka retries a commit
    # refused with UNKNOWN_TOPIC_OR_PARTITION, so an automatic commit of the old position
    # sent during the deletion would land on the new topic once it exists.
    consumer = Consumer({"bootstrap.servers": pykfk_broker.bootstrap, "group.id": "reborn",
                         "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 500,
                         "enable.auto.commit": False})
    consumer.subscribe(["reborn"])
    seen: list[bytes] = []
    errors: list[int] = []

    def poll_until(done, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error():
                errors.append(message.error().code())
            elif message is not None:
                seen.append(message.value())

    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        poll_until(lambda: len(seen) >= 10, 30)
        assert seen == [b"old-%d" % i for i in range(10)]
        consumer.commit(asynchronous=False)
        old = _topic_id(raw, "reborn")
        admin.delete_topics(["reborn"])["reborn"].result(20)
        # The consumer is told the topic is gone.
        poll_until(lambda: bool(errors), 20)
        assert errors and errors[0] == KafkaError.UNKNOWN_TOPIC_OR_PART
        poll_until(lambda: not consumer.assignment(), 20)  # and gives the partition up
        assert not consumer.assignment()
        _recreate(admin, raw, "reborn", old, deleted=True)
        _produce(pykfk_broker.bootstrap, "reborn", [b"new-%d" % i for i in range(15)])
        poll_until(lambda: len(seen) >= 25, 30)
    finally:
        raw.close()
        consumer.close()
    # The new topic is read from its start, not from the old topic's position (its
    # committed offsets went with it).
    assert seen[10:] == [b"new-%d" % i for i in range(15)]


def test_fetch_v15_and_v16_read_like_v13(pykfk_broker):
    """v15 carries the replica id in a tagged replica state (absent for consumers), v16
    may answer leaders' endpoints: a consumer's fetch reads the same records."""
    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    admin.create_topics([NewTopic("newer", 1, 1)])["newer"].result(20)
    _produce(pykfk_broker.bootstrap, "newer", [b"a", b"b"])
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        topic_id = _topic_id(raw, "newer")
        for version in (14, 15, 16):
            answer = raw.call(FETCH, version, {"max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                                               "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                                               "topics": [{"topic_id": topic_id, "partitions": [
                                                   {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                    "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                                               "forgotten_topics_data": [], "rack_id": ""})
            [part] = answer.responses[0].partitions
            assert (part.error_code, part.high_watermark, bool(part.records)) == (0, 2, True), version
    finally:
        raw.close()
