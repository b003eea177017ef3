"""Incremental fetch sessions (KIP-227): opening, incremental fetches that carry and
answer only what changed, forgotten partitions, closing, the errors for unknown
sessions and wrong epochs, the cache limit, and kafka-python's consumer (which uses
sessions) reading everything."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.clock import ManualClock
from pykfk.errors import ErrorCode
from pykfk.server.fetch_sessions import EVICTION_GRACE_MS, FetchSessionCache
from pykfk.testing import BrokerProcess, RawClient

FETCH = 1


def _fetch(raw: RawClient, session_id: int, epoch: int, offsets: dict[int, int], forgotten: list[int] = (),
           topic: str = "sess"):
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": session_id, "session_epoch": epoch, "rack_id": "",
            "topics": [{"topic": topic, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": o, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for p, o in offsets.items()]}] if offsets else [],
            "forgotten_topics_data": [{"topic": topic, "partitions": list(forgotten)}] if forgotten else []}
    return raw.call(FETCH, 12, body)


def _answered(response) -> dict[int, tuple[int, bool]]:
    """partition -> (high watermark, has records)"""
    return {p.partition_index: (p.high_watermark, bool(p.records)) for t in response.responses for p in t.partitions}


def _produce(bootstrap: str, partition: int, count: int = 1) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for _ in range(count):
        producer.produce("sess", b"v", partition=partition)
    assert producer.flush(10) == 0


@pytest.fixture
def session_broker(pykfk_broker):
    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    admin.create_topics([NewTopic("sess", 3, 1)])["sess"].result(20)
    return pykfk_broker


def test_incremental_fetches_carry_and_answer_only_what_changed(session_broker):
    raw = RawClient(session_broker.host, session_broker.port)
    try:
        opened = _fetch(raw, 0, 0, {0: 0, 1: 0, 2: 0})
        session_id = opened.session_id
        assert opened.error_code == ErrorCode.NONE and session_id != 0
        assert _answered(opened) == {0: (0, False), 1: (0, False), 2: (0, False)}

        assert _answered(_fetch(raw, session_id, 1, {})) == {}  # nothing new anywhere
        _produce(session_broker.bootstrap, 1, 3)
        assert _answered(_fetch(raw, session_id, 2, {})) == {1: (3, True)}  # the session's offset 0 read
        # The client moved on in partition 1 and forgets partition 2.
        assert _answered(_fetch(raw, session_id, 3, {1: 3}, forgotten=[2])) == {}
        _produce(session_broker.bootstrap, 2)
        _produce(session_broker.bootstrap, 0)
        assert _answered(_fetch(raw, session_id, 4, {})) == {0: (1, True)}  # not the forgotten one

        wrong_epoch = _fetch(raw, session_id, 9, {})
        assert (wrong_epoch.error_code, wrong_epoch.session_id) == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0)
        assert _fetch(raw, 424242, 1, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        closing = _fetch(raw, session_id, -1, {0: 0})  # closes it; answered as a full fetch
        assert closing.session_id == 0 and _answered(closing) == {0: (1, True)}
        assert _fetch(raw, session_id, 5, {}).error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        assert _fetch(raw, 0, 3, {0: 0}).error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        sessionless = _fetch(raw, 0, -1, {0: 0, 1: 0})
        assert sessionless.session_id == 0 and set(_answered(sessionless)) == {0, 1}
    finally:
        raw.close()


def test_a_full_cache_answers_without_a_session(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {"max.incremental.fetch.session.cache.slots": 1}).start()
    first, second = RawClient(broker.host, broker.port), RawClient(broker.host, broker.port)
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("sess", 3, 1)])["sess"].result(20)
        kept = _fetch(first, 0, 0, {0: 0})
        refused = _fetch(second, 0, 0, {0: 0, 1: 0})
        assert kept.session_id != 0
        assert refused.error_code == ErrorCode.NONE and refused.session_id == 0  # served, no session
        assert set(_answered(refused)) == {0, 1}
        assert _fetch(first, kept.session_id, 1, {}).error_code == ErrorCode.NONE  # not evicted
    finally:
        first.close()
        second.close()
        broker.stop()


def test_kafka_python_reads_everything_through_a_session(session_broker):
    from kafka import KafkaConsumer

    for partition in range(3):
        _produce(session_broker.bootstrap, partition, 50)
    consumer = KafkaConsumer("sess", bootstrap_servers=session_broker.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, group_id=None, fetch_max_wait_ms=50)
    try:
        seen = sum(1 for _ in consumer)
    finally:
        consumer.close()
    assert seen == 150


def test_eviction_keeps_followers_and_recent_sessions():
    clock = ManualClock()
    cache = FetchSessionCache(2, clock)
    follower = cache.create(privileged=True)
    consumer = cache.create(privileged=False)
    assert follower is not None and consumer is not None
    assert cache.create(privileged=False) is None  # the consumer's session is recent
    clock.advance(EVICTION_GRACE_MS)
    newer = cache.create(privileged=False)
    assert newer is not None and cache.get(consumer.session_id) is None
    assert cache.get(follower.session_id) is follower  # a follower's session is never evicted
    other_follower = cache.create(privileged=True)  # a follower evicts a consumer at once
    assert other_follower is not None and cache.get(newer.session_id) is None and len(cache) == 2
    assert cache.create(privileged=True) is None  # only followers left


def test_consumers_whose_sessions_are_evicted_read_everything(tmp_path, caplog):
    """Two kafka-python consumers share one session slot and evict each other's session
    at every turn: each gets FETCH_SESSION_ID_NOT_FOUND, starts over with a full fetch,
    and reads every record exactly once."""
    import logging

    from kafka import KafkaConsumer, TopicPartition

    broker = BrokerProcess(str(tmp_path / "data"), {"max.incremental.fetch.session.cache.slots": 1,
                                                    "min.incremental.fetch.session.eviction.ms": 0}).start()
    consumers = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("sess", 3, 1)])["sess"].result(20)
        for partition in range(3):
            _produce(broker.bootstrap, partition, 100)
        seen: list[list[tuple[int, int]]] = [[], []]
        for _ in range(2):
            consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, fetch_max_wait_ms=20,
                                     max_poll_records=25, enable_auto_commit=False)
            consumer.assign([TopicPartition("sess", p) for p in range(3)])
            consumer.seek_to_beginning()
            consumers.append(consumer)
        caplog.set_level(logging.INFO, logger="kafka.consumer.fetcher")
        for _ in range(400):
            if all(len(s) >= 300 for s in seen):
                break
            for consumer, got in zip(consumers, seen, strict=True):
                for records in consumer.poll(timeout_ms=50).values():
                    got.extend((r.partition, r.offset) for r in records)
        expected = sorted((p, o) for p in range(3) for o in range(100))
        assert sorted(seen[0]) == expected and sorted(seen[1]) == expected  # all, and no duplicates
        assert "FetchSessionIdNotFound" in caplog.text or "FETCH_SESSION_ID_NOT_FOUND" in caplog.text
    finally:
        for consumer in consumers:
            consumer.close()
        broker.stop()
