"""Transactions v2 (KIP-890 part 2, ``transaction.version`` 2): EndTxn v5 ends every
transaction at the next producer epoch and answers the producer id and epoch to go on
with; TxnOffsetCommit v5 and Produce v12+ add their partitions to the transaction
themselves; an exhausted epoch moves the id to a new producer id. First the coordinator
on its own, then a broker process spoken to at the new versions, read back by
confluent-kafka consumers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import kafka
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from pykfk._core.records import build_batch
from pykfk.errors import ErrorCode as E
from pykfk.group.storage import MemoryOffsetsLog
from pykfk.server import features
from pykfk.testing import BrokerProcess, RawClient, free_port, wait_until
from pykfk.txn.coordinator import MAX_PRODUCER_EPOCH, TransactionCoordinator, TxnConfig, TxnState
from pykfk.txn.records import decode_value
from tests.metrics.promtools import parse, scrape
from tests.server.test_handlers import create_topic

from .conftest import read_all
from .test_coordinator import (
    PARTITIONS,
    Ids,
    RecordingMarkers,
    setup,  # noqa: F401 - the coordinator fixture
)

PRODUCE, OFFSET_FETCH, FIND_COORDINATOR, API_VERSIONS = 0, 9, 10, 18
INIT_PRODUCER_ID, ADD_PARTITIONS, END_TXN, TXN_OFFSET_COMMIT = 22, 24, 26, 28


# -- the coordinator -------------------------------------------------------------------


async def test_every_transaction_ends_at_the_next_epoch(setup):  # noqa: F811
    coordinator, markers, _storage, _clock = setup
    _code, pid, epoch = await coordinator.init_producer_id("tx", 10000)
    assert await coordinator.add_partitions("tx", pid, epoch, [("t", 0)]) == E.NONE
    assert await coordinator.end_transaction_bumping("tx", pid, epoch, commit=True) == (E.NONE, pid, epoch + 1)
    await coordinator.wait_completed("tx")
    # The markers carry the new epoch, so a batch of the old one still in flight is fenced.
    assert markers.calls == [(pid, epoch + 1, True, frozenset({("t", 0)}))]
    assert coordinator.txns["tx"].state == TxnState.COMPLETE_COMMIT
    # A retry with the epoch before the bump gets the same answer; an abort of it or an
    # older epoch is a fenced producer's.
    assert await coordinator.end_transaction_bumping("tx", pid, epoch, commit=True) == (E.NONE, pid, epoch + 1)
    assert (await coordinator.end_transaction_bumping("tx", pid, epoch, commit=False))[0] == E.PRODUCER_FENCED
    # The old epoch cannot add partitions; the new one opens the next transaction.
    assert await coordinator.add_partitions("tx", pid, epoch, [("t", 1)]) == E.PRODUCER_FENCED
    assert await coordinator.add_partitions("tx", pid, epoch + 1, [("t", 1)]) == E.NONE
    assert coordinator.verify_partition("tx", pid, epoch + 1, ("t", 1)) == E.NONE


async def test_an_abort_with_no_transaction_open_bumps_the_epoch(setup):  # noqa: F811
    coordinator, markers, _storage, _clock = setup
    _code, pid, epoch = await coordinator.init_producer_id("tx", 10000)
    # A v2 producer cannot know whether its Produce opened a transaction: aborting is
    # allowed and fences whatever it may have sent. Committing nothing is not.
    assert (await coordinator.end_transaction_bumping("tx", pid, epoch, commit=True))[0] == E.INVALID_TXN_STATE
    assert await coordinator.end_transaction_bumping("tx", pid, epoch, commit=False) == (E.NONE, pid, epoch + 1)
    await coordinator.wait_completed("tx")
    assert coordinator.txns["tx"].state == TxnState.COMPLETE_ABORT and markers.calls == []
    assert await coordinator.end_transaction_bumping("tx", pid, epoch + 1, commit=False) == (E.NONE, pid, epoch + 2)


async def test_an_exhausted_epoch_moves_to_a_new_producer_id(setup):  # noqa: F811
    coordinator, markers, _storage, _clock = setup
    _code, pid, _epoch = await coordinator.init_producer_id("tx", 10000)
    meta = coordinator.txns["tx"]
    last = MAX_PRODUCER_EPOCH - 1
    meta.producer_epoch = last  # as after 32766 transactions
    assert await coordinator.add_partitions("tx", pid, last, [("t", 0)]) == E.NONE
    code, new_pid, new_epoch = await coordinator.end_transaction_bumping("tx", pid, last, commit=True)
    assert (code, new_epoch) == (E.NONE, 0) and new_pid != pid
    await coordinator.wait_completed("tx")
    # The transaction ends under its own producer id at the last epoch; the id goes on
    # with the new producer id.
    assert markers.calls == [(pid, MAX_PRODUCER_EPOCH, True, frozenset({("t", 0)}))]
    assert (meta.producer_id, meta.producer_epoch, meta.state) == (new_pid, 0, TxnState.COMPLETE_COMMIT)
    assert await coordinator.end_transaction_bumping("tx", pid, last, commit=True) == (E.NONE, new_pid, 0)
    assert await coordinator.add_partitions("tx", new_pid, 0, [("t", 0)]) == E.NONE


async def _reloaded(storage: MemoryOffsetsLog, epoch: int) -> tuple[TransactionCoordinator, RecordingMarkers]:
    """A coordinator that loads the partition from ``storage``, as a broker restarted
    or newly leading ``__transaction_state`` does."""
    ids = Ids()
    ids.next = 5000
    markers = RecordingMarkers()
    coordinator = TransactionCoordinator(TxnConfig(num_partitions=PARTITIONS, max_timeout_ms=60000),
                                         allocate_producer_id=ids, markers=markers)
    await coordinator.start()
    await coordinator.load_partition(0, storage, coordinator_epoch=epoch)
    return coordinator, markers


async def test_a_reload_goes_on_with_the_producer_id_handed_over(setup):  # noqa: F811
    """The producer id an exhausted epoch hands over, and the one before it, are in the
    log (NextProducerId, PreviousProducerId): a coordinator that loads the log while the
    markers are still being written, or after, neither fences the producer nor answers
    its retried EndTxn differently."""
    coordinator, markers, storage, _clock = setup
    _code, pid, _epoch = await coordinator.init_producer_id("tx", 10000)
    last = MAX_PRODUCER_EPOCH - 1
    coordinator.txns["tx"].producer_epoch = last  # as after 32766 transactions
    assert await coordinator.add_partitions("tx", pid, last, [("t", 0)]) == E.NONE
    markers.fail = {("t", 0)}  # the partition's leader is away: the commit stays prepared
    code, new_pid, new_epoch = await coordinator.end_transaction_bumping("tx", pid, last, commit=True)
    assert (code, new_epoch) == (E.NONE, 0) and new_pid != pid
    prepared = decode_value(storage.records[-1][1])
    assert (prepared.state, prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id,
            prepared.client_transaction_version) == (TxnState.PREPARE_COMMIT, pid, MAX_PRODUCER_EPOCH, new_pid, 2)
    await coordinator.unload_partition(0)  # the broker is gone

    again, again_markers = await _reloaded(storage, 6)
    try:
        meta = again.txns["tx"]
        assert (meta.state, meta.next_producer_id) == (TxnState.PREPARE_COMMIT, new_pid)
        assert await again.end_transaction_bumping("tx", pid, last, commit=True) == (E.NONE, new_pid, 0)
        await again.wait_completed("tx")  # the resumed markers, at the last epoch of the old id
        assert again_markers.calls == [(pid, MAX_PRODUCER_EPOCH, True, frozenset({("t", 0)}))]
        assert (meta.producer_id, meta.producer_epoch, meta.state) == (new_pid, 0, TxnState.COMPLETE_COMMIT)
    finally:
        await again.shutdown()
    completed = decode_value(storage.records[-1][1])
    assert (completed.producer_id, completed.previous_producer_id, completed.next_producer_id) == (
        new_pid, pid, -1)

    third, _markers = await _reloaded(storage, 7)
    try:
        assert await third.end_transaction_bumping("tx", pid, last, commit=True) == (E.NONE, new_pid, 0)
        assert (await third.end_transaction_bumping("tx", pid, last, commit=False))[0] == (
            E.INVALID_PRODUCER_ID_MAPPING)
        assert await third.add_partitions("tx", new_pid, 0, [("t", 1)]) == E.NONE
        assert await third.end_transaction_bumping("tx", new_pid, 0, commit=False) == (E.NONE, new_pid, 1)
        await third.wait_completed("tx")
    finally:
        await third.shutdown()
    # An ordinary bump reloaded: the epoch before it is still a retry, older ones fenced.
    fourth, _markers = await _reloaded(storage, 8)
    try:
        assert await fourth.end_transaction_bumping("tx", new_pid, 0, commit=False) == (E.NONE, new_pid, 1)
        assert (await fourth.end_transaction_bumping("tx", pid, last, commit=False))[0] == (
            E.INVALID_PRODUCER_ID_MAPPING)
    finally:
        await fourth.shutdown()


def test_transaction_version_2_is_offered_only_with_a_produce_that_adds_partitions():
    def level(produce_max: int) -> int:
        return {f.name: f.finalized for f in features.served_features(False, produce_max)}["transaction.version"]

    assert level(features.PRODUCE_ADDS_PARTITIONS) == 2
    assert level(features.PRODUCE_ADDS_PARTITIONS - 1) == 1


# -- a broker process at the new versions ----------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(str(tmp_path_factory.mktemp("txn-v2")), {
        "group.initial.rebalance.delay.ms": 0, "metrics.listener": f"http://127.0.0.1:{free_port()}"})
    process.start()
    yield process
    process.stop()


@pytest.fixture
def raw(broker: BrokerProcess) -> Iterator[RawClient]:
    client = RawClient(broker.host, broker.port)
    yield client
    client.close()


def _max_version(raw: RawClient, api_key: int) -> int:
    response = raw.call(API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    return next(k.max_version for k in response.api_keys if k.api_key == api_key)


def _init(raw: RawClient, transactional_id: str) -> tuple[int, int]:
    """InitProducerId v5, retried as a client does while the coordinator loads or the
    id's open transaction is being aborted."""
    assert raw.call(FIND_COORDINATOR, 1, {"key": transactional_id, "key_type": 1}).error_code == E.NONE
    return wait_until(lambda: _try_init(raw, transactional_id), 20, f"InitProducerId of {transactional_id}")


def _try_init(raw: RawClient, transactional_id: str) -> tuple[int, int] | None:
    answer = raw.call(INIT_PRODUCER_ID, 5, {"transactional_id": transactional_id, "transaction_timeout_ms": 30000,
                                            "producer_id": -1, "producer_epoch": -1})
    if answer.error_code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS):
        return None
    assert answer.error_code == E.NONE
    return answer.producer_id, answer.producer_epoch


def _produce(raw: RawClient, transactional_id: str, producer: tuple[int, int], topic: str,
             values: list[bytes], sequence: int = 0) -> int:
    """A transactional batch at the broker's newest Produce; before v12 the partition is
    added with AddPartitionsToTxn first, as a client of transaction version 1 does."""
    version = _max_version(raw, PRODUCE)
    if version < features.PRODUCE_ADDS_PARTITIONS:
        body = {"v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer[0],
                "v3_and_below_producer_epoch": producer[1],
                "v3_and_below_topics": [{"name": topic, "partitions": [0]}]}
        added = raw.call(ADD_PARTITIONS, 3, body).results_by_topic_v3_and_below[0].results_by_partition[0]
        if added.partition_error_code != E.NONE:
            return int(added.partition_error_code)
    batch = build_batch([(None, v, 1000, []) for v in values], producer_id=producer[0], producer_epoch=producer[1],
                        base_sequence=sequence, is_transactional=True)
    body = {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "topic_id": _topic_id(raw, topic),
                            "partition_data": [{"index": 0, "records": batch}]}]}
    return int(raw.call(PRODUCE, version, body).responses[0].partition_responses[0].error_code)


def _topic_id(raw: RawClient, topic: str) -> uuid.UUID:
    """The topic's id (Produce v13+ names topics by id), from Metadata v12."""
    answer = raw.call(3, 12, {"topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                              "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return answer.topics[0].topic_id


def _end(raw: RawClient, transactional_id: str, producer: tuple[int, int], commit: bool) -> tuple[int, int, int]:
    answer = raw.call(END_TXN, 5, {"transactional_id": transactional_id, "producer_id": producer[0],
                                   "producer_epoch": producer[1], "committed": commit})
    return answer.error_code, answer.producer_id, answer.producer_epoch


def _commit_offset(raw: RawClient, transactional_id: str, producer: tuple[int, int], group: str,
                   topic: str, offset: int) -> int:
    assert raw.call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0}).error_code == E.NONE
    body = {"transactional_id": transactional_id, "group_id": group, "producer_id": producer[0],
            "producer_epoch": producer[1], "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                        "committed_leader_epoch": -1, "committed_metadata": ""}]}]}

    def attempt() -> int | None:
        code = int(raw.call(TXN_OFFSET_COMMIT, 5, body).topics[0].partitions[0].error_code)
        return None if code in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS) else code

    answered = wait_until(lambda: [code for code in [attempt()] if code is not None], 20,
                          "TxnOffsetCommit past the group coordinator's loading")
    return answered[0]


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=20)[0].offset)
    finally:
        consumer.close()


def test_versions_and_transaction_version_as_kafka_41_offers_them(raw):
    response = raw.call(API_VERSIONS, 4, {"client_software_name": "t", "client_software_version": "1"})
    served = {k.api_key: k.max_version for k in response.api_keys}
    assert (served[INIT_PRODUCER_ID], served[25], served[END_TXN], served[TXN_OFFSET_COMMIT]) == (5, 4, 5, 5)
    # Produce v12+ adds partitions through the coordinator: transaction version 2.
    assert served[PRODUCE] >= features.PRODUCE_ADDS_PARTITIONS
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}
    assert finalized["transaction.version"] == (2, 2)
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    assert supported["transaction.version"] == (0, 2)


def test_commit_abort_and_offsets_at_transaction_version_2(broker, raw):
    bootstrap = f"{broker.host}:{broker.port}"
    create_topic(raw, "v2-data", 1)
    create_topic(raw, "v2-source", 1)
    before = _request_counts(broker)
    producer = _init(raw, "v2-app")
    # A committed transaction: records and, with no AddOffsetsToTxn, the group's offsets.
    assert _produce(raw, "v2-app", producer, "v2-data", [b"c0", b"c1", b"c2"]) == E.NONE
    assert _commit_offset(raw, "v2-app", producer, "v2-group", "v2-source", 42) == E.NONE
    code, pid, epoch = _end(raw, "v2-app", producer, commit=True)
    assert (code, pid, epoch) == (E.NONE, producer[0], producer[1] + 1)
    # A retry with the epoch it ended at gets the same answer.
    assert _end(raw, "v2-app", producer, commit=True) == (E.NONE, pid, epoch)
    bumped = (pid, epoch)
    # The next transaction at the new epoch, its sequence from 0, then aborted.
    wait_until(lambda: _produce(raw, "v2-app", bumped, "v2-data", [b"a0", b"a1"]) == E.NONE, 20,
               "the next transaction's first batch accepted once the markers are written")
    assert _commit_offset(raw, "v2-app", bumped, "v2-group", "v2-source", 99) == E.NONE
    code, pid, epoch = _end(raw, "v2-app", bumped, commit=False)
    assert (code, pid, epoch) == (E.NONE, producer[0], producer[1] + 2)
    # The old epochs are a zombie's: fenced at EndTxn and at Produce.
    assert _end(raw, "v2-app", producer, commit=True)[0] == E.PRODUCER_FENCED
    assert _produce(raw, "v2-app", producer, "v2-data", [b"zombie"], sequence=3) in (
        E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED)
    committed = wait_until(lambda: read_all(bootstrap, "v2-data", 1, "read_committed") or None, 30,
                           "the committed transaction read")
    assert committed == [b"c0", b"c1", b"c2"]
    assert read_all(bootstrap, "v2-data", 1, "read_uncommitted") == [b"c0", b"c1", b"c2", b"a0", b"a1"]
    assert wait_until(lambda: _committed(bootstrap, "v2-group", "v2-source") == 42, 30,
                      "the offset of the committed transaction, not of the aborted one")
    # Every partition was added by the coordinator itself: no AddPartitionsToTxn nor
    # AddOffsetsToTxn reached the broker, the batches came at Produce v12+.
    sent = {key: count - before.get(key, 0) for key, count in _request_counts(broker).items()
            if count > before.get(key, 0)}
    assert not {key for key in sent if key[0] in ("AddPartitionsToTxn", "AddOffsetsToTxn")}, sent
    assert {version for name, version in sent if name == "Produce"} == {_max_version(raw, PRODUCE)}
    assert _max_version(raw, PRODUCE) >= features.PRODUCE_ADDS_PARTITIONS


def test_a_second_producer_of_the_id_fences_the_first(raw):
    create_topic(raw, "v2-fence", 1)
    first = _init(raw, "v2-fenced")
    assert _produce(raw, "v2-fenced", first, "v2-fence", [b"zombie"]) == E.NONE
    second = _init(raw, "v2-fenced")
    assert second[0] == first[0] and second[1] > first[1] + 1  # the open transaction aborted at a bump
    assert _end(raw, "v2-fenced", first, commit=True)[0] == E.PRODUCER_FENCED
    assert _end(raw, "v2-fenced", second, commit=False) == (E.NONE, second[0], second[1] + 1)



def _request_counts(broker: BrokerProcess) -> dict[tuple[str, int], float]:
    """(request, version) -> how many the broker has received (its request counters)."""
    url = broker.overrides["metrics.listener"] + "/metrics"
    return {(dict(labels)["request"], int(dict(labels)["version"])): count
            for (name, labels), count in parse(scrape(url)).items()
            if name == "kafka_network_requestmetrics_requests_total"}


def test_clients_of_earlier_levels_keep_their_versions(broker, raw):
    """With transaction.version finalized, librdkafka 2.16 and kafka-python 3.0 still
    send the versions before KIP-890 part 2 (they implement none of it), and their
    transactions commit, abort and fence as before."""
    bootstrap = f"{broker.host}:{broker.port}"
    create_topic(raw, "v2-clients", 1)
    before = _request_counts(broker)
    first = Producer({"bootstrap.servers": bootstrap, "transactional.id": "v2-librdkafka"})
    first.init_transactions(30)
    first.begin_transaction()
    first.produce("v2-clients", b"confluent-committed")
    first.commit_transaction(30)
    first.begin_transaction()
    first.produce("v2-clients", b"confluent-aborted")
    first.flush(30)
    first.abort_transaction(30)
    first.begin_transaction()
    first.produce("v2-clients", b"zombie")
    first.flush(30)
    # A second producer of the id fences the first, whose open transaction is aborted.
    second = Producer({"bootstrap.servers": bootstrap, "transactional.id": "v2-librdkafka"})
    second.init_transactions(30)
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    second.begin_transaction()
    second.produce("v2-clients", b"second")
    second.commit_transaction(30)
    python = kafka.KafkaProducer(bootstrap_servers=bootstrap, transactional_id="v2-kafka-python")
    python.init_transactions()
    python.begin_transaction()
    python.send("v2-clients", b"kafka-python-committed")
    python.commit_transaction()
    python.close()
    assert read_all(bootstrap, "v2-clients", 1, "read_committed") == [
        b"confluent-committed", b"second", b"kafka-python-committed"]
    # On the wire: librdkafka's InitProducerId v4, AddPartitionsToTxn v0, EndTxn v1;
    # kafka-python's v4, v3, v3. Nothing of transaction version 2.
    sent = {key: count - before.get(key, 0) for key, count in _request_counts(broker).items()
            if count > before.get(key, 0)}
    transactional = {key for key in sent if key[0] in ("InitProducerId", "AddPartitionsToTxn", "AddOffsetsToTxn",
                                                       "EndTxn", "TxnOffsetCommit")}
    assert transactional == {("InitProducerId", 4), ("AddPartitionsToTxn", 0), ("AddPartitionsToTxn", 3),
                             ("EndTxn", 1), ("EndTxn", 3)}, sent
