"""KIP-467 with a real client: a batch whose records break a rule is refused whole with
INVALID_RECORD, the response naming each offending record (``record_errors``) and the
cause (``error_message``), so the client fails exactly those records with INVALID_RECORD.

librdkafka (as Kafka's Java producer) does not retry the others of the refused batch:
it fails them with the local error _INVALID_DIFFERENT_RECORD ("an invalid record in the
same batch caused the failure of this message too"), which tells the application they
may be sent again. Kafka stores nothing of the batch either way; sent again, they are
stored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient

PRODUCE = 0
COMPACTED = "compacted"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(str(tmp_path_factory.mktemp("record-errors") / "data"))
    proc.start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        admin.create_topics([NewTopic(COMPACTED, 1, 1, config={"cleanup.policy": "compact"})])[COMPACTED].result(15)
        yield proc
    finally:
        proc.stop()


def _produce(broker: BrokerProcess, messages: list[tuple[int, bytes | None]]) -> dict[int, Any]:
    """Every message in one batch (the metadata known first, all queued within linger.ms);
    the delivery error of each, None when stored."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, "batch.num.messages": 1000})
    producer.list_topics(COMPACTED, timeout=10)
    reports: dict[int, Any] = {}
    for number, key in messages:
        producer.produce(COMPACTED, key=key, value=b"value-%d" % number,
                         on_delivery=lambda err, _msg, number=number: reports.__setitem__(number, err))
    assert producer.flush(30) == 0
    return reports


def _stored(broker: BrokerProcess) -> list[tuple[bytes | None, bytes | None]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "record-errors",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(COMPACTED, 0, 0)])
        _low, high = consumer.get_watermark_offsets(TopicPartition(COMPACTED, 0), timeout=10)
        out: list[tuple[bytes | None, bytes | None]] = []
        for _ in range(100):
            if len(out) >= high:
                break
            for msg in consumer.consume(100, timeout=1):
                assert msg.error() is None, msg.error()
                out.append((msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def test_a_batch_with_keyless_records_on_a_compacted_topic_fails_exactly_those(broker: BrokerProcess) -> None:
    keys = {n: (None if n % 10 == 0 else b"key-%d" % n) for n in range(100)}
    reports = _produce(broker, list(keys.items()))
    assert len(reports) == 100
    failed = {n: err for n, err in reports.items() if err is not None}
    # The ten keyless records fail as invalid; the client fails the 90 others of the
    # refused batch with its own "different record" error, as Kafka's producer does.
    assert {n for n, err in failed.items() if err.code() == KafkaError.INVALID_RECORD} == {
        n for n in range(100) if n % 10 == 0}
    assert Counter(err.code() for n, err in failed.items() if n % 10) == {KafkaError._INVALID_DIFFERENT_RECORD: 90}
    assert _stored(broker) == []  # nothing of the refused batch was stored

    # The application sends the 90 valid ones again: all stored, in order.
    again = _produce(broker, [(n, keys[n]) for n, err in sorted(failed.items())
                              if err.code() == KafkaError._INVALID_DIFFERENT_RECORD])
    assert len(again) == 90 and all(err is None for err in again.values())
    assert _stored(broker) == [(keys[n], b"value-%d" % n) for n in range(100) if n % 10]


def test_the_produce_response_names_each_keyless_record(broker: BrokerProcess) -> None:
    """The response itself, read at v8 (the first with record_errors) and at the newest
    version: the batch index of every keyless record, a message for each and one for
    the partition; other errors carry neither."""
    from pykfk._core.records import build_batch

    batch = build_batch([(None if i in (1, 4, 5) else b"k", b"v", 1_700_000_000_000, []) for i in range(6)])
    client = RawClient(broker.host, broker.port)
    try:
        for version in (8, 9):
            body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                    "topic_data": [{"name": COMPACTED, "partition_data": [{"index": 0, "records": batch}]},
                                   {"name": "no-such-topic", "partition_data": [{"index": 0, "records": batch}]}]}
            response = client.call(PRODUCE, version, body)
            part = response.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.INVALID_RECORD and part.base_offset == -1
            assert [e.batch_index for e in part.record_errors] == [1, 4, 5]
            assert all("without a key" in e.batch_index_error_message for e in part.record_errors)
            assert part.error_message and "3 invalid record" in part.error_message
            other = response.responses[1].partition_responses[0]
            assert other.error_code != ErrorCode.NONE and other.record_errors == [] and other.error_message is None
    finally:
        client.close()


def test_a_timestamp_outside_the_window_names_each_record(broker: BrokerProcess) -> None:
    """The same for INVALID_TIMESTAMP (message.timestamp.before.max.ms, KIP-937)."""
    import time

    from pykfk._core.records import build_batch

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("window", 1, 1, config={"message.timestamp.before.max.ms": "3600000"})])[
        "window"].result(15)
    now = int(time.time() * 1000)
    stamps = [now, now - 7_200_000, now, now - 10_000_000]
    batch = build_batch([(b"k", b"v", stamp, []) for stamp in stamps])
    client = RawClient(broker.host, broker.port)
    try:
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                "topic_data": [{"name": "window", "partition_data": [{"index": 0, "records": batch}]}]}
        part = client.call(PRODUCE, 9, body).responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.INVALID_TIMESTAMP
        assert [e.batch_index for e in part.record_errors] == [1, 3]
        assert "message.timestamp.before.max.ms" in part.record_errors[0].batch_index_error_message
    finally:
        client.close()
