"""Bad transactional requests get Kafka's errors and change nothing: unknown
transactional ids, wrong producer ids and epochs, EndTxn out of order, transactional
Produce to a partition not added to the transaction, timeouts above the maximum."""

from __future__ import annotations

import pytest

from pykfk._core.records import build_batch
from pykfk.errors import ErrorCode as E
from pykfk.testing import RawClient
from tests.server.test_handlers import create_topic, list_offset

FIND_COORDINATOR, INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN, TXN_OFFSET_COMMIT = 10, 22, 24, 25, 26, 28
PRODUCE = 0


@pytest.fixture
def raw(pykfk_broker_factory):
    broker = pykfk_broker_factory(**{"transaction.max.timeout.ms": 60000})
    client = RawClient(broker.host, broker.port)
    assert client.call(FIND_COORDINATOR, 1, {"key": "tx", "key_type": 1}).error_code == E.NONE
    yield client
    client.close()


def init(raw, transactional_id="tx", timeout_ms=10000, version=4, producer_id=-1, epoch=-1):
    return raw.call(INIT_PRODUCER_ID, version, {"transactional_id": transactional_id, "transaction_timeout_ms": timeout_ms,
                                                "producer_id": producer_id, "producer_epoch": epoch})


def add_partitions(raw, producer_id, epoch, topic="t", partitions=(0,), transactional_id="tx", version=3):
    body = {"v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer_id,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": list(partitions)}]}
    response = raw.call(ADD_PARTITIONS, version, body)
    return {(t.name, p.partition_index): p.partition_error_code
            for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}


def end_txn(raw, producer_id, epoch, committed=True, transactional_id="tx", version=3):
    return raw.call(END_TXN, version, {"transactional_id": transactional_id, "producer_id": producer_id,
                                       "producer_epoch": epoch, "committed": committed}).error_code


def produce_transactional(raw, producer_id, epoch, sequence=0, topic="t", transactional_id="tx"):
    batch = build_batch([(b"k", b"v", 1000, [])], producer_id=producer_id, producer_epoch=epoch,
                        base_sequence=sequence, is_transactional=True)
    body = {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}]}
    return raw.call(PRODUCE, 7, body).responses[0].partition_responses[0].error_code


def test_unknown_transactional_id_and_producer_id(raw):
    create_topic(raw, "t", 1)
    assert add_partitions(raw, 12345, 0, transactional_id="nobody") == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert end_txn(raw, 12345, 0, transactional_id="nobody") == E.INVALID_PRODUCER_ID_MAPPING
    answer = init(raw)
    assert answer.error_code == E.NONE and answer.producer_epoch == 0
    assert add_partitions(raw, answer.producer_id + 1, 0) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert add_partitions(raw, answer.producer_id, 0, topic="missing") == {("missing", 0): E.UNKNOWN_TOPIC_OR_PARTITION}


def test_wrong_epochs_are_fenced(raw):
    create_topic(raw, "t", 1)
    first = init(raw)
    second = init(raw)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    stale = first.producer_epoch
    assert add_partitions(raw, first.producer_id, stale) == {("t", 0): E.PRODUCER_FENCED}
    assert add_partitions(raw, first.producer_id, stale, version=1) == {("t", 0): E.INVALID_PRODUCER_EPOCH}
    assert end_txn(raw, first.producer_id, stale) == E.PRODUCER_FENCED
    assert end_txn(raw, first.producer_id, stale, version=1) == E.INVALID_PRODUCER_EPOCH
    # KIP-360: bumping one's own epoch needs the current one.
    assert init(raw, producer_id=first.producer_id, epoch=7).error_code == E.PRODUCER_FENCED
    assert init(raw, producer_id=first.producer_id, epoch=7, version=3).error_code == E.INVALID_PRODUCER_EPOCH
    bumped = init(raw, producer_id=first.producer_id, epoch=1)
    assert (bumped.error_code, bumped.producer_epoch) == (E.NONE, 2)


def test_end_txn_out_of_order(raw):
    create_topic(raw, "t", 1)
    producer = init(raw)
    pid, epoch = producer.producer_id, producer.producer_epoch
    assert end_txn(raw, pid, epoch, committed=True) == E.INVALID_TXN_STATE  # nothing open
    assert add_partitions(raw, pid, epoch) == {("t", 0): E.NONE}
    assert end_txn(raw, pid, epoch, committed=False) == E.NONE
    # Committing what is being (or was) aborted is refused; retrying the abort is not.
    assert end_txn(raw, pid, epoch, committed=True) in (E.INVALID_TXN_STATE, E.CONCURRENT_TRANSACTIONS)
    code = E.CONCURRENT_TRANSACTIONS
    for _ in range(200):
        code = end_txn(raw, pid, epoch, committed=False)
        if code != E.CONCURRENT_TRANSACTIONS:
            break
    assert code == E.NONE
    assert end_txn(raw, pid, epoch, committed=True) == E.INVALID_TXN_STATE


def test_transactional_produce_needs_the_partition_in_the_transaction(raw):
    create_topic(raw, "t", 1)
    producer = init(raw)
    pid, epoch = producer.producer_id, producer.producer_epoch
    assert produce_transactional(raw, pid, epoch) == E.INVALID_TXN_STATE
    assert produce_transactional(raw, pid + 1, epoch) == E.INVALID_PRODUCER_ID_MAPPING
    assert list_offset(raw, "t", 0, -1).offset == 0  # nothing was written
    assert add_partitions(raw, pid, epoch) == {("t", 0): E.NONE}
    assert produce_transactional(raw, pid, epoch) == E.NONE
    assert produce_transactional(raw, pid, epoch - 1, sequence=1) == E.INVALID_PRODUCER_EPOCH


def test_transaction_timeout_above_the_maximum(raw):
    assert init(raw, timeout_ms=60001).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert init(raw, timeout_ms=0).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert init(raw, transactional_id="").error_code == E.INVALID_REQUEST


def test_batch_with_a_producer_id_but_no_sequence_is_invalid(raw):
    create_topic(raw, "t", 1)
    batch = build_batch([(b"k", b"v", 1000, [])], producer_id=77, producer_epoch=0, base_sequence=-1)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": batch}]}]}
    assert raw.call(PRODUCE, 7, body).responses[0].partition_responses[0].error_code == E.INVALID_RECORD


# -- TRANSACTION_ABORTABLE (KIP-890 part 1): the versions that understand it ----------------

OFFSET_FETCH = 9


def find_group_coordinator(raw, group):
    for _ in range(200):
        if raw.call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0}).error_code == E.NONE:
            return
    raise AssertionError(f"no coordinator for group {group}")


def add_offsets(raw, producer_id, epoch, group, transactional_id="tx"):
    return raw.call(ADD_OFFSETS, 3, {"transactional_id": transactional_id, "producer_id": producer_id,
                                     "producer_epoch": epoch, "group_id": group}).error_code


def txn_offset_commit(raw, producer_id, epoch, group, offset, version, transactional_id="tx"):
    body = {"transactional_id": transactional_id, "group_id": group, "producer_id": producer_id,
            "producer_epoch": epoch, "generation_id": -1, "member_id": "", "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": offset,
                                                     "committed_leader_epoch": -1, "committed_metadata": ""}]}]}
    return raw.call(TXN_OFFSET_COMMIT, version, body).topics[0].partitions[0].error_code


def committed(raw, group):
    response = raw.call(OFFSET_FETCH, 7, {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0]}],
                                          "require_stable": False})
    return response.topics[0].partitions[0].committed_offset


def verify(raw, producer_id, epoch, version, partitions=(0,), transactional_id="tx"):
    body = {"transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                              "producer_epoch": epoch, "verify_only": True,
                              "topics": [{"name": "t", "partitions": list(partitions)}]}]}
    response = raw.call(ADD_PARTITIONS, version, body)
    assert response.error_code == E.NONE
    (txn,) = response.results_by_transaction
    return {(t.name, p.partition_index): p.partition_error_code for t in txn.topic_results
            for p in t.results_by_partition}


def test_txn_offset_commit_outside_the_transaction_is_abortable_from_v4(raw):
    create_topic(raw, "t", 1)
    find_group_coordinator(raw, "g")
    producer = init(raw)
    pid, epoch = producer.producer_id, producer.producer_epoch
    # No transaction open at all, then one without the group's offsets partition in it.
    assert txn_offset_commit(raw, pid, epoch, "g", 5, version=4) == E.TRANSACTION_ABORTABLE
    assert add_partitions(raw, pid, epoch) == {("t", 0): E.NONE}
    assert txn_offset_commit(raw, pid, epoch, "g", 5, version=4) == E.TRANSACTION_ABORTABLE
    assert txn_offset_commit(raw, pid, epoch, "g", 5, version=3) == E.INVALID_TXN_STATE
    assert txn_offset_commit(raw, pid, epoch, "g", 5, version=0) == E.INVALID_TXN_STATE
    # Abortable: the producer aborts and its next transaction works.
    assert end_txn(raw, pid, epoch, committed=False, version=4) == E.NONE
    code = E.CONCURRENT_TRANSACTIONS
    for _ in range(200):
        code = add_offsets(raw, pid, epoch, "g")
        if code != E.CONCURRENT_TRANSACTIONS:
            break
    assert code == E.NONE
    assert txn_offset_commit(raw, pid, epoch, "g", 7, version=4) == E.NONE
    assert txn_offset_commit(raw, pid, epoch, "g", 8, version=4) == E.NONE  # already in: not asked again
    assert end_txn(raw, pid, epoch, committed=True, version=4) == E.NONE
    for _ in range(200):  # the COMMIT marker follows the EndTxn answer
        if committed(raw, "g") == 8:
            break
    assert committed(raw, "g") == 8


def test_txn_offset_commit_with_an_old_epoch_or_another_producer_id(raw):
    create_topic(raw, "t", 1)
    find_group_coordinator(raw, "g")
    first = init(raw)
    second = init(raw)
    assert add_offsets(raw, second.producer_id, second.producer_epoch, "g") == E.NONE
    assert txn_offset_commit(raw, first.producer_id, first.producer_epoch, "g", 5, version=4) \
        == E.INVALID_PRODUCER_EPOCH
    assert txn_offset_commit(raw, first.producer_id + 1, second.producer_epoch, "g", 5, version=4) \
        == E.INVALID_PRODUCER_ID_MAPPING
    assert committed(raw, "g") == -1


def test_add_partitions_v5_verification_answers_transaction_abortable(raw):
    create_topic(raw, "t", 2)
    producer = init(raw)
    pid, epoch = producer.producer_id, producer.producer_epoch
    assert verify(raw, pid, epoch, version=5) == {("t", 0): E.TRANSACTION_ABORTABLE}
    assert verify(raw, pid, epoch, version=4) == {("t", 0): E.INVALID_TXN_STATE}
    assert add_partitions(raw, pid, epoch, partitions=(0,)) == {("t", 0): E.NONE}
    assert verify(raw, pid, epoch, version=5, partitions=(0, 1)) == {("t", 0): E.NONE,
                                                                      ("t", 1): E.TRANSACTION_ABORTABLE}
    assert verify(raw, pid + 1, epoch, version=5) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    # A v5 add (not only a check) adds, as v4 does.
    body = {"transactions": [{"transactional_id": "tx", "producer_id": pid, "producer_epoch": epoch,
                              "verify_only": False, "topics": [{"name": "t", "partitions": [1]}]}]}
    added = raw.call(ADD_PARTITIONS, 5, body).results_by_transaction[0].topic_results[0].results_by_partition
    assert [(p.partition_index, p.partition_error_code) for p in added] == [(1, E.NONE)]
    assert verify(raw, pid, epoch, version=5, partitions=(0, 1)) == {("t", 0): E.NONE, ("t", 1): E.NONE}
    # While the transaction is being committed: CONCURRENT_TRANSACTIONS at v5, as Kafka.
    assert end_txn(raw, pid, epoch, committed=True, version=4) == E.NONE
    codes = verify(raw, pid, epoch, version=5)
    assert codes[("t", 0)] in (E.CONCURRENT_TRANSACTIONS, E.TRANSACTION_ABORTABLE)
    for _ in range(200):
        codes = verify(raw, pid, epoch, version=5)
        if codes[("t", 0)] != E.CONCURRENT_TRANSACTIONS:
            break
    assert codes == {("t", 0): E.TRANSACTION_ABORTABLE}  # completed: no longer in a transaction


def test_end_txn_v4_answers_as_v3(raw):
    create_topic(raw, "t", 1)
    producer = init(raw)
    pid, epoch = producer.producer_id, producer.producer_epoch
    assert end_txn(raw, pid, epoch, committed=True, version=4) == E.INVALID_TXN_STATE  # nothing open
    assert add_partitions(raw, pid, epoch) == {("t", 0): E.NONE}
    assert end_txn(raw, pid, epoch - 1, version=4) == E.PRODUCER_FENCED
    assert end_txn(raw, pid + 1, epoch, version=4) == E.INVALID_PRODUCER_ID_MAPPING
    assert end_txn(raw, pid, epoch, committed=True, version=4) == E.NONE
