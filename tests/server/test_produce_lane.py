"""The Produce handler's compiled lane (``pykfk._core.append_path``): a plain append
(one magic-2 batch without producer id, or an idempotent producer's next batch in
sequence, to a log without settings that change it) is made in compiled code;
everything else is handed to the Python path and answers as before.
Real clients against a broker on an event loop thread of the test process, whose
counts of appended / handed-over partitions the test reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk._core import append_path
from pykfk._core.records import build_batch, iter_records
from pykfk.errors import ErrorCode
from pykfk.testing import InProcessBroker, RawClient

PRODUCE = 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    proc = InProcessBroker(str(tmp_path_factory.mktemp("produce-lane") / "data"))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _create(broker: InProcessBroker, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(15)


def _produce(broker: InProcessBroker, topic: str, count: int, **conf: object) -> list[object]:
    """``count`` records, each in its own request; the delivery errors (None: stored)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0, **conf})
    producer.list_topics(topic, timeout=10)
    errors: list[object] = []
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=i % 2,
                         on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(10)
    assert producer.flush(30) == 0
    return errors


def _read(broker: InProcessBroker, topic: str, partition: int) -> list[tuple[int, bytes]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"lane-{topic}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        out: list[tuple[int, bytes]] = []
        for _ in range(200):
            if len(out) >= high:
                break
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                out.append((message.offset(), message.value()))
        return out
    finally:
        consumer.close()


def _raw_produce(broker: InProcessBroker, topic: str, records: bytes, *, acks: int = 1, version: int = 9) -> object:
    client = RawClient(broker.host, broker.port)
    try:
        body = {"transactional_id": None, "acks": acks, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
        return client.call(PRODUCE, version, body).responses[0].partition_responses[0]
    finally:
        client.close()


@pytest.mark.parametrize("acks", ["1", "all"])
def test_plain_appends_take_the_compiled_lane(broker: InProcessBroker, acks: str) -> None:
    topic = f"plain-{acks}"
    _create(broker, topic, 2)
    appended, handed_over = append_path.counts()
    assert _produce(broker, topic, 20, acks=acks) == [None] * 20
    now_appended, now_handed_over = append_path.counts()
    assert now_appended - appended == 20
    assert now_handed_over == handed_over
    stats = broker._started_broker().replica_manager.topic_stats.for_topic(topic)
    assert stats.messages_in == 20
    assert stats.bytes_in == sum(plog.size_bytes for plog in (
        broker._started_broker().replica_manager.leader_log(topic, p) for p in (0, 1)))
    for partition in (0, 1):
        stored = _read(broker, topic, partition)
        assert [offset for offset, _value in stored] == list(range(10))
        assert [value for _offset, value in stored] == [b"value-%d" % i for i in range(partition, 20, 2)]


def test_idempotent_producers_take_the_lane_after_their_first_batch(broker: InProcessBroker) -> None:
    """An idempotent producer's first batch to a partition (a producer new to it) goes
    to the Python path, which applies every producer-state rule; its next batches in
    sequence take the lane."""
    topic = "idempotent"
    _create(broker, topic, 2)
    appended, handed_over = append_path.counts()
    assert _produce(broker, topic, 10, **{"enable.idempotence": True}) == [None] * 10
    now_appended, now_handed_over = append_path.counts()
    assert (now_appended - appended, now_handed_over - handed_over) == (8, 2)
    for partition in (0, 1):
        stored = _read(broker, topic, partition)
        assert [offset for offset, _value in stored] == list(range(5))
        assert [value for _offset, value in stored] == [b"value-%d" % i for i in range(partition, 10, 2)]
        state = broker._started_broker().replica_manager.leader_log(topic, partition).producer_state
        ((entry),) = state.producers.values()
        assert entry.last_seq == 4
        assert [(b.first_seq, b.first_offset, b.last_offset) for b in entry.batches] == [(i, i, i) for i in range(5)]


def _idempotent(producer_id: int, epoch: int, sequence: int, count: int = 1) -> bytes:
    return build_batch([(b"k", b"v%d" % (sequence + i), 1_700_000_000_000 + sequence + i, []) for i in range(count)],
                       producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)


def test_producer_state_rules_hold_with_the_lane(broker: InProcessBroker) -> None:
    """Sequences and epochs of one idempotent producer, as raw Produce v9 requests: the
    batches the lane takes are recorded as the Python path records them (a retry of one
    is answered with its original offsets), and retries, gaps and old epochs are
    answered as Kafka answers them."""
    topic = "idempotent-rules"
    _create(broker, topic, 1)
    pid = 7000

    def produce(epoch: int, sequence: int, count: int = 1) -> tuple[int, int]:
        result = _raw_produce(broker, topic, _idempotent(pid, epoch, sequence, count))
        return result.error_code, result.base_offset

    def taken(call: tuple[int, int, int] | tuple[int, int], lane: bool) -> tuple[int, int]:
        appended, handed_over = append_path.counts()
        answer = produce(*call)
        now_appended, now_handed_over = append_path.counts()
        assert (now_appended - appended, now_handed_over - handed_over) == ((1, 0) if lane else (0, 1)), call
        return answer

    assert taken((0, 0), lane=False) == (ErrorCode.NONE, 0)     # a producer new to the partition
    assert taken((0, 1), lane=True) == (ErrorCode.NONE, 1)
    assert taken((0, 2, 3), lane=True) == (ErrorCode.NONE, 2)   # sequences 2-4, offsets 2-4
    # Retries of batches the lane and the Python path wrote: their original offsets, nothing written.
    assert taken((0, 2, 3), lane=False) == (ErrorCode.NONE, 2)
    assert taken((0, 1), lane=False) == (ErrorCode.NONE, 1)
    assert taken((0, 0), lane=False) == (ErrorCode.NONE, 0)
    plog = broker._started_broker().replica_manager.leader_log(topic, 0)
    assert plog.log_end_offset == 5
    # A gap in the sequence, and a batch that overlaps the last one without matching it.
    assert taken((0, 7), lane=False) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert taken((0, 4, 2), lane=False) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert taken((0, 5), lane=True) == (ErrorCode.NONE, 5)
    # A new epoch starts at sequence 0 (by the Python path); the old epoch is fenced.
    assert taken((1, 3), lane=False) == (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1)
    assert taken((1, 0), lane=False) == (ErrorCode.NONE, 6)
    assert taken((0, 6), lane=False) == (ErrorCode.INVALID_PRODUCER_EPOCH, -1)
    assert taken((1, 1, 2), lane=True) == (ErrorCode.NONE, 7)
    assert taken((1, 1, 2), lane=False) == (ErrorCode.NONE, 7)
    assert plog.log_end_offset == 9
    entry = plog.producer_state.producers[pid]
    assert (entry.producer_epoch, entry.last_seq) == (1, 2)
    assert [(b.first_seq, b.last_seq, b.first_offset, b.last_offset) for b in entry.batches] == [
        (0, 0, 6, 6), (1, 2, 7, 8)]
    # What a consumer reads: every record once, in order.
    assert [value for _offset, value in _read(broker, topic, 0)] == [
        b"v0", b"v1", b"v2", b"v3", b"v4", b"v5", b"v0", b"v1", b"v2"]


def test_a_transactional_batch_without_a_transactional_id_is_refused(broker: InProcessBroker) -> None:
    topic = "idempotent-txn-flag"
    _create(broker, topic, 1)
    pid = 7100
    assert _raw_produce(broker, topic, _idempotent(pid, 0, 0)).error_code == ErrorCode.NONE
    flagged = build_batch([(b"k", b"t", 1_700_000_000_000, [])], producer_id=pid, producer_epoch=0,
                          base_sequence=1, is_transactional=True)
    appended, handed_over = append_path.counts()
    result = _raw_produce(broker, topic, flagged)  # (Kafka's answer: no transactional id)
    assert (result.error_code, result.base_offset) == (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
    assert append_path.counts() == (appended, handed_over)
    # Nothing was stored: the producer's next batch without the flag takes the lane.
    result = _raw_produce(broker, topic, _idempotent(pid, 0, 1))
    assert (result.error_code, result.base_offset) == (ErrorCode.NONE, 1)
    assert append_path.counts() == (appended + 1, handed_over)


@pytest.mark.parametrize("idempotent", [False, True], ids=["plain", "idempotent"])
def test_a_roll_is_handed_to_python_and_every_record_stays_readable(broker: InProcessBroker, idempotent: bool) -> None:
    topic = "rolling-idempotent" if idempotent else "rolling"
    _create(broker, topic, 2, **{"segment.bytes": "1024"})
    appended, handed_over = append_path.counts()
    assert _produce(broker, topic, 60, **{"enable.idempotence": idempotent}) == [None] * 60
    now_appended, now_handed_over = append_path.counts()
    assert now_appended > appended and now_handed_over > handed_over  # rolls went to Python
    stored = _read(broker, topic, 1)
    assert [offset for offset, _value in stored] == list(range(30))
    assert stored[-1][1] == b"value-59"
    plog = broker._started_broker().replica_manager.leader_log(topic, 1)
    assert len(plog.segments) > 2
    if idempotent:  # the batches of both paths are in the producer state, in order
        ((entry),) = plog.producer_state.producers.values()
        assert [(b.first_seq, b.first_offset) for b in entry.batches] == [(i, i) for i in range(25, 30)]


def test_refusals_through_the_lane_answer_as_before(broker: InProcessBroker) -> None:
    topic = "refusals"
    _create(broker, topic, 1)
    batch = bytearray(build_batch([(b"k", b"v", 1_700_000_000_000, [])]))
    batch[-1] ^= 0xFF  # the CRC no longer matches
    result = _raw_produce(broker, topic, bytes(batch))
    assert result.error_code == ErrorCode.CORRUPT_MESSAGE
    # A record count the records do not have: refused by the same validation.
    bad = bytearray(build_batch([(b"k", b"v", 1_700_000_000_000, [])]))
    bad[57:61] = (2).to_bytes(4, "big")
    bad[17:21] = b"\0\0\0\0"
    assert _raw_produce(broker, topic, bytes(bad)).error_code == ErrorCode.CORRUPT_MESSAGE
    # min.insync.replicas above the ISR: acks=all refused before any append, acks=1 stored.
    strict = "strict"
    _create(broker, strict, 1, **{"min.insync.replicas": "2"})
    good = build_batch([(b"k", b"v", 1_700_000_000_000, [])])
    assert _raw_produce(broker, strict, good, acks=-1).error_code == ErrorCode.NOT_ENOUGH_REPLICAS
    stored = _raw_produce(broker, strict, good, acks=1)
    assert stored.error_code == ErrorCode.NONE and stored.base_offset == 0
    # Nothing of the refused batches was written: the next append takes offset 0.
    ok = _raw_produce(broker, topic, good)
    assert ok.error_code == ErrorCode.NONE and ok.base_offset == 0
    # A partition this broker does not have, and invalid acks.
    assert _raw_produce(broker, "no-such-topic", good).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _raw_produce(broker, topic, good, acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    assert _raw_produce(broker, "__consumer_offsets", good).error_code in (
        ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


def test_compacted_and_log_append_time_topics_keep_their_rules(broker: InProcessBroker) -> None:
    compacted = "lane-compacted"
    _create(broker, compacted, 1, **{"cleanup.policy": "compact"})
    keyless = build_batch([(None, b"v", 1_700_000_000_000, [])])
    result = _raw_produce(broker, compacted, keyless)
    assert result.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in result.record_errors] == [0]
    stamped = "lane-append-time"
    _create(broker, stamped, 1, **{"message.timestamp.type": "LogAppendTime"})
    result = _raw_produce(broker, stamped, build_batch([(b"k", b"v", 1_000, [])]))
    assert result.error_code == ErrorCode.NONE and result.log_append_time_ms > 1_000
    plog = broker._started_broker().replica_manager.leader_log(stamped, 0)
    region = plog.read(0, 1 << 20).file_region
    assert region is not None
    assert [r.timestamp for r in iter_records(region.read())] == [result.log_append_time_ms]


@pytest.mark.parametrize(("config", "lane_takes"), [
    ({"segment.jitter.ms": "1000"}, 1),     # only the first append (to an empty segment)
    ({"flush.messages": "1"}, 0),           # every append is due a flush
    ({"cleanup.policy": "compact"}, 0),     # keys checked by the log
    ({"message.timestamp.type": "LogAppendTime"}, 0),
    ({}, 4),
], ids=["jitter", "flush", "compact", "append-time", "plain"])
def test_settings_that_change_an_append_leave_it_to_python(broker: InProcessBroker, config: dict[str, str],
                                                           lane_takes: int) -> None:
    topic = "settings-" + "-".join(k.replace(".", "_") for k in config) if config else "settings-none"
    _create(broker, topic, 1, **config)
    appended, handed_over = append_path.counts()
    for i in range(4):
        result = _raw_produce(broker, topic, build_batch([(b"k%d" % i, b"v", 1_700_000_000_000 + i, [])]), acks=-1)
        assert result.error_code == ErrorCode.NONE and result.base_offset == i
    now_appended, now_handed_over = append_path.counts()
    assert (now_appended - appended, now_handed_over - handed_over) == (lane_takes, 4 - lane_takes)
