"""Fetch's compiled partition lane (``pykfk._core.fetch_path``): a partition this broker
leads, read by a consumer or a follower at the current leader epoch while its log holds
no transaction in flight, is answered with no Python call (``fetch_path.counts()[0]``);
everything else goes through the replica manager's Python (``counts()[1]``) and answers
as before. Real clients against a broker on an event loop thread of the test process,
whose counts the test reads; the follower is a broker process of a two-broker cluster."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk._core import fetch_path
from pykfk._core.records import iter_records
from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, InProcessBroker, RawClient, wait_until

FETCH = 1
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    proc = InProcessBroker(str(tmp_path_factory.mktemp("fetch-lane") / "data"), {
        "log.retention.check.interval.ms": 100, "log.segment.delete.delay.ms": 0,
        "group.initial.rebalance.delay.ms": 0})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


class _Counted:
    """The lane's counts from now on: (compiled, handed over)."""

    def __init__(self) -> None:
        self._before = fetch_path.counts()

    def __call__(self) -> tuple[int, int]:
        compiled, handed_over = fetch_path.counts()
        return compiled - self._before[0], handed_over - self._before[1]


def _create(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(TIMEOUT_S)


@contextlib.contextmanager
def _client(broker: Any) -> Iterator[RawClient]:
    client = RawClient(broker.host, broker.port)
    try:
        yield client
    finally:
        client.close()


def _fetch(client: RawClient, topic: str, offset: int, *, version: int = 11, isolation: int = 0,
           leader_epoch: int = -1, partition: int = 0) -> Any:
    """One partition's answer to a Fetch asking from ``offset``, answered at once."""
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1, "rack_id": "",
            "forgotten_topics_data": [],
            "topics": [{"topic": topic, "partitions": [
                {"partition": partition, "current_leader_epoch": leader_epoch, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    answer = client.call(FETCH, version, body)
    ((part,),) = [t.partitions for t in answer.responses]
    return part


def _offsets(records: Any) -> list[int]:
    return [r.offset for r in iter_records(bytes(records or b""))]


def _log_bytes(log_dir: str, name: str) -> bytes:
    """The record batches of a partition's segment files, in offset order."""
    directory = os.path.join(log_dir, name)
    parts = []
    for file_name in sorted(f for f in os.listdir(directory) if f.endswith(".log")):
        with open(os.path.join(directory, file_name), "rb") as f:
            parts.append(f.read())
    return b"".join(parts)


def _tail(bootstrap: str, topic: str, partitions: int, done: Callable[[dict[int, list[tuple[int, bytes]]]], bool],
          produce: Callable[[], None], **conf: object) -> dict[int, list[tuple[int, bytes]]]:
    """A confluent-kafka consumer tailing ``topic`` from offset 0 while ``produce`` runs
    in a thread; the (offset, value) it got per partition once ``done`` says so."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"tail-{topic}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 50, **conf})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    failed: list[BaseException] = []

    def write() -> None:
        try:
            produce()
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread
            failed.append(exc)

    writer = threading.Thread(target=write)
    try:
        writer.start()
        deadline = time.monotonic() + 60
        while not failed and time.monotonic() < deadline and not done(got):
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got[message.partition()].append((message.offset(), message.value()))
        writer.join(30)
        assert not writer.is_alive()
    finally:
        consumer.close()
    if failed:
        raise failed[0]
    return got


def _producing(bootstrap: str, topic: str, values: list[bytes], partitions: int, every: int = 10) -> Callable[[], None]:
    """Writes ``values`` round-robin over the partitions, ``every`` at a time; raises on
    any delivery error."""

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        errors: list[object] = []
        for i, value in enumerate(values):
            producer.produce(topic, value, partition=i % partitions,
                             on_delivery=lambda err, _msg: err is None or errors.append(err))
            if i % every == every - 1:
                assert producer.flush(TIMEOUT_S) == 0
                time.sleep(0.01)
        assert producer.flush(TIMEOUT_S) == 0
        assert errors == []

    return produce


def test_a_tailing_consumer_reads_through_the_compiled_lane_across_segment_rolls(broker: InProcessBroker) -> None:
    topic = "rolls"
    _create(broker.bootstrap, topic, 2, **{"segment.bytes": "2048"})
    values = [b"%04d-" % i + b"r" * 150 for i in range(400)]
    counted = _Counted()
    got = _tail(broker.bootstrap, topic, 2, lambda got: sum(map(len, got.values())) >= len(values),
                _producing(broker.bootstrap, topic, values, 2))
    compiled, handed_over = counted()
    for partition in (0, 1):
        assert [offset for offset, _value in got[partition]] == list(range(200))
        assert [value for _offset, value in got[partition]] == values[partition::2]
        plog = broker._started_broker().replica_manager.leader_log(topic, partition)
        assert len(plog.segments) > 10  # rolled all along while the consumer tailed
    assert compiled > 20
    assert handed_over == 0


def test_a_tailing_consumer_keeps_reading_while_retention_deletes_the_log(broker: InProcessBroker) -> None:
    topic = "retained"
    _create(broker.bootstrap, topic, 1, **{"segment.bytes": "4096", "retention.bytes": "12000",
                                           "file.delete.delay.ms": "0"})
    values = [b"%04d-" % i + b"d" * 200 for i in range(600)]
    counted = _Counted()
    last = len(values) - 1
    got = _tail(broker.bootstrap, topic, 1, lambda got: bool(got[0]) and got[0][-1][0] == last,
                _producing(broker.bootstrap, topic, values, 1, every=5))
    offsets = [offset for offset, _value in got[0]]
    # Whatever retention took before the consumer read it, what it read is in order, each
    # record once, and ends with the last one written.
    assert offsets == sorted(set(offsets)) and offsets[-1] == len(values) - 1
    assert all(value == values[offset] for offset, value in got[0])
    plog = broker._started_broker().replica_manager.leader_log(topic, 0)
    wait_until(lambda: plog.log_start_offset > 0, TIMEOUT_S, "retention deleted segments")
    assert counted()[0] > 20 and counted()[1] == 0
    with _client(broker) as client:
        counted = _Counted()
        assert _fetch(client, topic, 0).error_code == ErrorCode.OFFSET_OUT_OF_RANGE  # deleted
        start = plog.log_start_offset
        answer = _fetch(client, topic, start)
        assert answer.error_code == 0 and answer.log_start_offset == start
        assert _offsets(answer.records)[0] == start
        assert counted() == (2, 0)


def test_a_fetch_out_of_range_is_answered_offset_out_of_range(broker: InProcessBroker) -> None:
    topic = "range"
    _create(broker.bootstrap, topic)
    _producing(broker.bootstrap, topic, [b"v%d" % i for i in range(5)], 1, every=1)()  # a batch each
    with _client(broker) as client:
        counted = _Counted()
        at_end = _fetch(client, topic, 5)
        assert (at_end.error_code, at_end.high_watermark, _offsets(at_end.records)) == (0, 5, [])
        for version in (4, 11, 12):
            assert _fetch(client, topic, 6, version=version).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert _fetch(client, topic, -3).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
        whole = _fetch(client, topic, 2)
        assert (whole.error_code, whole.high_watermark, whole.last_stable_offset, whole.log_start_offset) == (0, 5, 5, 0)
        assert _offsets(whole.records) == [2, 3, 4]
        assert counted() == (6, 0)


def test_read_committed_falls_back_while_a_transaction_is_open(broker: InProcessBroker) -> None:
    topic = "txn-lane"
    _create(broker.bootstrap, topic)
    _producing(broker.bootstrap, topic, [b"before-%d" % i for i in range(3)], 1, every=1)()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "lane-txn"})
    producer.init_transactions(TIMEOUT_S)
    with _client(broker) as client:
        producer.begin_transaction()
        for i in range(2):
            producer.produce(topic, b"in-txn-%d" % i, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        counted = _Counted()
        held = _fetch(client, topic, 0, isolation=1)
        assert (held.error_code, held.high_watermark, held.last_stable_offset) == (0, 5, 3)
        assert _offsets(held.records) == [0, 1, 2]
        uncommitted = _fetch(client, topic, 0)
        assert (uncommitted.last_stable_offset, _offsets(uncommitted.records)) == (3, [0, 1, 2, 3, 4])
        assert counted() == (0, 2)  # the last stable offset is the log's Python's answer

        producer.commit_transaction(TIMEOUT_S)  # the marker at offset 5 (written after the answer)
        plog = broker._started_broker().replica_manager.leader_log(topic, 0)
        wait_until(lambda: plog.high_watermark == 6, TIMEOUT_S, "the commit marker written")
        counted = _Counted()
        committed = _fetch(client, topic, 0, isolation=1)
        assert (committed.high_watermark, committed.last_stable_offset, committed.aborted_transactions) == (6, 6, None)
        assert _offsets(committed.records) == [0, 1, 2, 3, 4, 5]  # (5: the commit marker)
        assert counted() == (1, 0)

        producer.begin_transaction()
        for i in range(2):
            producer.produce(topic, b"aborted-%d" % i, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        producer.abort_transaction(TIMEOUT_S)  # offsets 6, 7 and the marker at 8
        wait_until(lambda: plog.high_watermark == 9, TIMEOUT_S, "the abort marker written")
        counted = _Counted()
        after_abort = _fetch(client, topic, 6, isolation=1)
        assert (after_abort.high_watermark, after_abort.last_stable_offset) == (9, 9)
        ((aborted),) = after_abort.aborted_transactions
        assert aborted.first_offset == 6 and aborted.producer_id >= 0
        assert _offsets(after_abort.records) == [6, 7, 8]  # the consumer drops 6 and 7 by the list
        assert _fetch(client, topic, 6).aborted_transactions is None  # read_uncommitted: no list
        assert counted() == (2, 0)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txn-lane", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                break  # the end of the partition
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"before-0", b"before-1", b"before-2", b"in-txn-0", b"in-txn-1"]


def test_a_stale_leader_epoch_is_fenced_and_a_follower_replicates_through_the_lane(
        tmp_path: Any, zookeeper_chroot: str) -> None:
    settings = {"zookeeper.connect": zookeeper_chroot, "zookeeper.session.timeout.ms": 6000,
                "replica.lag.time.max.ms": 10000, "replica.fetch.backoff.ms": 200,
                "offsets.topic.replication.factor": 1, "controlled.shutdown.retry.backoff.ms": 200}
    leader = InProcessBroker(str(tmp_path / "leader"), {**settings, "broker.id": 0}).start()
    follower = BrokerProcess(str(tmp_path / "follower"), {**settings, "broker.id": 1})
    try:
        follower.start(timeout=60)
        admin = AdminClient({"bootstrap.servers": leader.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 2, TIMEOUT_S, "both brokers registered")
        made = admin.create_topics([NewTopic("replicated", num_partitions=1, replica_assignment=[[0, 1]]),
                                    NewTopic("moved", num_partitions=1, replica_assignment=[[1, 0]])])
        for future in made.values():
            future.result(TIMEOUT_S)
        manager = leader._started_broker().replica_manager

        def in_sync(topic: str) -> bool:
            partition = admin.list_topics(topic, timeout=10).topics[topic].partitions.get(0)
            return partition is not None and sorted(partition.isrs) == [0, 1]

        wait_until(lambda: in_sync("replicated"), TIMEOUT_S, "the follower in sync")
        counted = _Counted()
        values = [b"%04d" % i + b"f" * 300 for i in range(300)]
        producer = Producer({"bootstrap.servers": leader.bootstrap, "acks": "all", "linger.ms": 0})
        for i, value in enumerate(values):  # acks=all: each waits for the follower's fetch
            producer.produce("replicated", value, partition=0)
            if i % 10 == 9:
                assert producer.flush(TIMEOUT_S) == 0
        assert producer.flush(TIMEOUT_S) == 0
        compiled, handed_over = counted()
        assert compiled > 30 and handed_over == 0  # the follower's fetches, then the answers
        plog = manager.leader_log("replicated", 0)
        assert plog.high_watermark == plog.log_end_offset == 300
        # The follower's copy: the leader's batches, byte for byte, every record there.
        wait_until(lambda: _log_bytes(follower.log_dir, "replicated-0") == _log_bytes(
            str(tmp_path / "leader"), "replicated-0"), TIMEOUT_S, "the follower's copy whole")
        copied = list(iter_records(_log_bytes(follower.log_dir, "replicated-0")))
        assert [(r.offset, r.value) for r in copied] == list(enumerate(values))

        # "moved": led by broker 1 at epoch 0; broker 1 stops, broker 0 leads at a later epoch.
        wait_until(lambda: in_sync("moved"), TIMEOUT_S, "moved in sync")
        follower.stop(timeout=30)
        wait_until(lambda: (found := manager.partitions.get(("moved", 0))) is not None and found.role == "leader",
                   TIMEOUT_S, "broker 0 leading moved")
        epoch = manager.partitions[("moved", 0)].leader_epoch
        assert epoch >= 1
        with _client(leader) as client:
            counted = _Counted()
            assert _fetch(client, "moved", 0, leader_epoch=epoch - 1).error_code == ErrorCode.FENCED_LEADER_EPOCH
            assert _fetch(client, "moved", 0, leader_epoch=epoch + 1).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
            assert counted() == (0, 2)
            current = _fetch(client, "moved", 0, leader_epoch=epoch)
            assert (current.error_code, current.high_watermark) == (0, 0)
            assert counted() == (1, 2)
    finally:
        follower.stop(timeout=30)
        leader.stop()
