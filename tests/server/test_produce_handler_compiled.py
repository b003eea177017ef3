"""The Produce handler compiled (``pykfk._core.append_path.handle``): a plain Produce is
decoded, handled and answered with no Python frame, and what is not plain (quotas,
transactions, refusals, acks=all waits) still answers as Kafka does through the handler's
Python. Real clients (confluent-kafka, kafka-python) and hand-built frames on sockets,
against a broker serving on its own event loop thread of the test process (whose counts
of partitions appended by the compiled lane / handed to Python the tests read), and a
broker process for transactions.

A request whose batches are transactional needs a transactional id (Kafka's
KafkaApis.handleProduceRequest): without one, every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is stored."""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic
from confluent_kafka.admin import ResourcePatternType as AclPatternType
from confluent_kafka.admin import ResourceType as AclResourceType
from kafka import KafkaProducer

from pykfk._core import append_path
from pykfk._core.records import build_batch
from pykfk.errors import ErrorCode
from pykfk.protocol import framing
from pykfk.server.handlers import produce as produce_handler
from pykfk.server.handlers.metadata import topic_ids
from pykfk.testing import BrokerProcess, InProcessBroker, RawClient, wait_until
from tests.security import test_acls
from tests.server import test_produce_lane
from tests.txn.conftest import read_all

PRODUCE = 0
ALTER_CLIENT_QUOTAS = 49
TIMEOUT_S = 30

# A broker on an event loop thread of the test process (the lane's counts are its own).
broker = test_produce_lane.broker
# A broker process with SASL/PLAIN logins and the ACL authorizer.
acl_broker = test_acls.acl_broker


@pytest.fixture(scope="module")
def process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(str(tmp_path_factory.mktemp("produce-compiled-process") / "data"),
                         {"group.initial.rebalance.delay.ms": 0}, log_level="WARNING").start()
    try:
        yield proc
    finally:
        proc.stop()


def _create(bootstrap: str, name: str, partitions: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(TIMEOUT_S)


def _confluent(bootstrap: str, topic: str, count: int, partitions: int, **conf: object) -> list[object]:
    """``count`` records, each in its own request, spread over the partitions; the
    delivery errors (None: stored)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    producer.list_topics(topic, timeout=10)
    errors: list[object] = []
    for i in range(count):
        producer.produce(topic, value=b"%s-%d" % (topic.encode(), i), partition=i % partitions,
                         on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(10)
    assert producer.flush(TIMEOUT_S) == 0
    return errors


def _frame(api_key: int, version: int, correlation_id: int, body: dict[str, object]) -> bytes:
    return framing.encode_request(api_key, version, correlation_id, "hand-built", body)


def _exchange(host: str, port: int, frame: bytes, version: int) -> object:
    """One hand-built Produce frame over a plain socket; its decoded answer."""
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        _correlation_id, answer = framing.decode_response(PRODUCE, version, _recv(sock, size))
        return answer


def _recv(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def _answers(answer: object) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic, partition) -> (error code, base offset) of a ProduceResponse."""
    return {(topic.name, p.index): (p.error_code, p.base_offset)
            for topic in answer.responses for p in topic.partition_responses}  # type: ignore[attr-defined]


def _end_offset(broker: InProcessBroker, topic: str, partition: int) -> int:
    return broker._started_broker().replica_manager.leader_log(topic, partition).log_end_offset


def test_the_handler_is_compiled() -> None:
    """Decode, handle and encode are compiled functions: no interpreter frame per request."""
    for hook in (produce_handler.decode_request, produce_handler.handle, produce_handler.encode_response):
        assert type(hook).__name__ == "cython_function_or_method", hook


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_plain_records_take_the_compiled_path(broker: InProcessBroker, acks: str) -> None:
    topic = f"compiled-plain-{acks}"
    _create(broker.bootstrap, topic, 2)
    appended, handed_over = append_path.counts()
    assert _confluent(broker.bootstrap, topic, 12, 2, acks=acks) == [None] * 12
    assert append_path.counts() == (appended + 12, handed_over)
    assert sorted(read_all(broker.bootstrap, topic, 2, "read_uncommitted")) == sorted(b"%s-%d" % (topic.encode(), i) for i in range(12))


def test_confluent_idempotent_records_take_the_compiled_path_after_the_first(broker: InProcessBroker) -> None:
    topic = "compiled-idempotent"
    _create(broker.bootstrap, topic, 2)
    appended, handed_over = append_path.counts()
    assert _confluent(broker.bootstrap, topic, 12, 2, **{"enable.idempotence": True}) == [None] * 12
    # A producer's first batch to each partition sets up its state in Python.
    assert append_path.counts() == (appended + 10, handed_over + 2)
    assert read_all(broker.bootstrap, topic, 2, "read_uncommitted") == [b"compiled-idempotent-%d" % i for i in (0, 2, 4, 6, 8, 10, 1, 3,
                                                                                           5, 7, 9, 11)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_kafka_python_records_take_the_compiled_path(broker: InProcessBroker, acks: object) -> None:
    topic = f"compiled-kafka-python-{acks}"
    _create(broker.bootstrap, topic, 1)
    appended, handed_over = append_path.counts()
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=acks, linger_ms=0, enable_idempotence=False)
    try:
        for i in range(10):
            producer.send(topic, b"kp-%d" % i, partition=0).get(timeout=TIMEOUT_S)
    finally:
        producer.close(timeout=TIMEOUT_S)
    # (acks=0: the producer does not wait for the broker)
    wait_until(lambda: append_path.counts()[0] >= appended + 10, TIMEOUT_S, "the appends")
    assert append_path.counts() == (appended + 10, handed_over)
    assert read_all(broker.bootstrap, topic, 1, "read_uncommitted") == [b"kp-%d" % i for i in range(10)]


def test_a_request_over_its_quota_is_appended_and_answered_with_a_throttle_time(broker: InProcessBroker) -> None:
    topic = "compiled-quota"
    _create(broker.bootstrap, topic, 1)
    raw = RawClient(broker.host, broker.port)
    try:
        entity = [{"entity_type": "client-id", "entity_name": "hand-built"}]
        answer = raw.call(ALTER_CLIENT_QUOTAS, 1, {"entries": [{"entity": entity, "ops": [
            {"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}], "validate_only": False})
        assert answer.entries[0].error_code == ErrorCode.NONE  # type: ignore[attr-defined]
        appended, handed_over = append_path.counts()
        batch = build_batch([(None, bytes(8192), 1_700_000_000_000, [])])
        body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
        answer = _exchange(broker.host, broker.port, _frame(PRODUCE, 9, 1, body), 9)
        assert _answers(answer) == {(topic, 0): (ErrorCode.NONE, 0)}
        assert answer.throttle_time_ms > 0  # type: ignore[attr-defined]
        assert append_path.counts() == (appended + 1, handed_over)  # appended by the compiled lane
    finally:
        raw.call(ALTER_CLIENT_QUOTAS, 1, {"entries": [{"entity": entity, "ops": [
            {"key": "producer_byte_rate", "value": 0.0, "remove": True}]}], "validate_only": False})
        raw.close()
    assert _end_offset(broker, topic, 0) == 1


def test_unknown_topics_partitions_and_ids_are_answered_as_kafka_does(broker: InProcessBroker) -> None:
    topic = "compiled-known"
    _create(broker.bootstrap, topic, 2)
    batch = build_batch([(None, b"v", 1_700_000_000_000, [])])
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": batch}, {"index": 7, "records": batch}]},
        {"name": "compiled-no-such-topic", "partition_data": [{"index": 0, "records": batch}]},
        {"name": topic, "partition_data": [{"index": 1, "records": batch}]}]}
    answer = _exchange(broker.host, broker.port, _frame(PRODUCE, 9, 2, body), 9)
    # One entry per topic (the repeated topic's partitions gathered under it).
    assert [t.name for t in answer.responses] == [topic, "compiled-no-such-topic"]  # type: ignore[attr-defined]
    assert _answers(answer) == {
        (topic, 0): (ErrorCode.NONE, 0), (topic, 7): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1),
        (topic, 1): (ErrorCode.NONE, 0), ("compiled-no-such-topic", 0): (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    # v13 names topics by id: an id no topic has is UNKNOWN_TOPIC_ID.
    known = topic_ids(broker._started_broker().metadata).id_of(topic)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
        {"topic_id": known, "partition_data": [{"index": 0, "records": batch}]},
        {"topic_id": uuid.uuid4(), "partition_data": [{"index": 0, "records": batch}]}]}
    answer = _exchange(broker.host, broker.port, _frame(PRODUCE, 13, 3, body), 13)
    codes = [(t.topic_id == known, p.error_code, p.base_offset)  # type: ignore[attr-defined]
             for t in answer.responses for p in t.partition_responses]  # type: ignore[attr-defined]
    assert sorted(codes) == [(False, ErrorCode.UNKNOWN_TOPIC_ID, -1), (True, ErrorCode.NONE, 1)]
    assert (_end_offset(broker, topic, 0), _end_offset(broker, topic, 1)) == (2, 1)


@pytest.mark.parametrize("version", [3, 9, 13])
def test_transactional_batches_without_a_transactional_id_are_refused_and_not_stored(
        broker: InProcessBroker, version: int) -> None:
    topic = f"compiled-no-txn-id-v{version}"
    _create(broker.bootstrap, topic, 3)
    plain = build_batch([(None, b"plain", 1_700_000_000_000, [])])
    transactional = build_batch([(None, b"txn", 1_700_000_000_000, [])], producer_id=4100, producer_epoch=0,
                                base_sequence=0, is_transactional=True)
    # One transactional batch refuses the whole request, the plain partitions too.
    partitions = [{"index": 0, "records": plain}, {"index": 1, "records": transactional},
                  {"index": 2, "records": plain}]
    name = {"topic_id": topic_ids(broker._started_broker().metadata).id_of(topic)} if version >= 13 else {"name": topic}
    body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{**name, "partition_data": partitions}]}
    appended, handed_over = append_path.counts()
    answer = _exchange(broker.host, broker.port, _frame(PRODUCE, version, 4, body), version)
    results = [p for t in answer.responses for p in t.partition_responses]  # type: ignore[attr-defined]
    assert sorted(p.index for p in results) == [0, 1, 2]
    for p in results:
        assert (p.error_code, p.base_offset, p.log_start_offset) == (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, -1)
        if version >= 8:
            assert p.error_message == "Transactional Id authorization failed."
    assert append_path.counts() == (appended, handed_over)
    assert [_end_offset(broker, topic, p) for p in range(3)] == [0, 0, 0]
    producer_state = broker._started_broker().replica_manager.leader_log(topic, 1).producer_state
    assert 4100 not in producer_state.producers
    # acks=0 has no answer to carry the refusal: the connection is closed (Kafka's way).
    body["acks"] = 0
    with socket.create_connection((broker.host, broker.port), timeout=10) as sock:
        sock.sendall(_frame(PRODUCE, version, 5, body))
        sock.settimeout(5)
        assert sock.recv(1) == b""
    assert [_end_offset(broker, topic, p) for p in range(3)] == [0, 0, 0]


def test_a_transactional_producer_commits_and_aborts(process: BrokerProcess) -> None:
    topic = "compiled-transactions"
    _create(process.bootstrap, topic, 2)
    producer = Producer({"bootstrap.servers": process.bootstrap, "transactional.id": "compiled-tx", "linger.ms": 0})
    producer.init_transactions(TIMEOUT_S)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(4):
            producer.produce(topic, value=b"%s-%d" % (outcome.encode(), i), partition=i % 2)
        producer.flush(TIMEOUT_S)
        if outcome == "commit":
            producer.commit_transaction(TIMEOUT_S)
        else:
            producer.abort_transaction(TIMEOUT_S)
    committed = read_all(process.bootstrap, topic, 2, "read_committed")
    assert committed == [b"commit-0", b"commit-2", b"commit-0", b"commit-2",
                         b"commit-1", b"commit-3", b"commit-1", b"commit-3"]
    assert len(read_all(process.bootstrap, topic, 2, "read_uncommitted")) == 12


def test_a_broker_process_refuses_transactional_batches_without_an_id(process: BrokerProcess) -> None:
    topic = "compiled-process-no-txn-id"
    _create(process.bootstrap, topic, 1)
    transactional = build_batch([(None, b"txn", 1_700_000_000_000, [])], producer_id=4200, producer_epoch=0,
                                base_sequence=0, is_transactional=True)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": transactional}]}]}
    answer = _exchange("127.0.0.1", process.port, _frame(PRODUCE, 9, 6, body), 9)
    assert _answers(answer) == {(topic, 0): (ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)}
    assert read_all(process.bootstrap, topic, 1, "read_uncommitted") == []


def test_transactional_batches_need_write_on_their_transactional_id(acl_broker: BrokerProcess) -> None:
    """With ACLs on, a request carrying transactional batches needs WRITE on its
    transactional id (Kafka's check, before any topic); batches that are not
    transactional need none."""
    topic = "compiled-acl-txn"
    admin = test_acls._admin(acl_broker)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    test_acls._allow(acl_broker, AclBinding(AclResourceType.TOPIC, topic, AclPatternType.LITERAL, "User:alice", "*",
                                            AclOperation.WRITE, AclPermissionType.ALLOW))
    transactional = build_batch([(None, b"txn", 1_700_000_000_000, [])], producer_id=4300, producer_epoch=0,
                                base_sequence=0, is_transactional=True)
    plain = build_batch([(None, b"plain", 1_700_000_000_000, [])])

    def produce(records: bytes) -> int:
        raw = test_acls._raw(acl_broker, "alice")
        try:
            body = {"transactional_id": "compiled-tx-alice", "acks": 1, "timeout_ms": 5000,
                    "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}]}
            return int(raw.call(PRODUCE, 9, body).responses[0].partition_responses[0].error_code)  # type: ignore[attr-defined]
        finally:
            raw.close()

    assert produce(transactional) == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert test_acls._end_offset(acl_broker, topic) == 0
    assert produce(plain) == ErrorCode.NONE  # no transactional batch: no transactional id check
    assert test_acls._end_offset(acl_broker, topic) == 1
    test_acls._allow(acl_broker, AclBinding(AclResourceType.TRANSACTIONAL_ID, "compiled-tx-alice",
                                            AclPatternType.LITERAL, "User:alice", "*", AclOperation.WRITE,
                                            AclPermissionType.ALLOW))
    # Allowed now: refused further on, the producer having no transaction open.
    assert produce(transactional) not in (ErrorCode.NONE, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    assert test_acls._end_offset(acl_broker, topic) == 1
