"""DescribeTransactions, ListTransactions and DescribeProducers over a transaction that
confluent-kafka's producer holds open, then commits; DescribeProducers' coordinator
epoch across restarts; ListTransactions' duration (v1) and transactional id (v2) filters."""

from __future__ import annotations

import glob
import os
import time

from confluent_kafka import Producer

from pykfk.errors import ErrorCode as E
from pykfk.group.offsets import partition_for
from pykfk.testing import RawClient
from pykfk.txn.records import TRANSACTION_STATE_TOPIC
from tests.txn.conftest import TIMEOUT_S, create_topics

METADATA, DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 3, 61, 65, 66


def test_open_transaction_described_listed_and_its_producer_shown(broker):
    create_topics(broker.bootstrap, 2, "watched")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-admin"})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("watched", b"x", partition=1)
    producer.flush(TIMEOUT_S)
    raw = RawClient(broker.host, broker.port)
    try:
        described = raw.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx-admin", "nobody"]})
        ongoing, unknown = described.transaction_states
        assert (ongoing.error_code, ongoing.transaction_state) == (E.NONE, "Ongoing")
        assert [(t.topic, list(t.partitions)) for t in ongoing.topics] == [("watched", [1])]
        assert ongoing.transaction_start_time_ms > 0
        assert unknown.error_code == E.TRANSACTIONAL_ID_NOT_FOUND

        listed = raw.call(LIST_TRANSACTIONS, 1, {"state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [],
                                                 "duration_filter": -1})
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("tx-admin", "Ongoing")]
        assert list(listed.unknown_state_filters) == ["Bogus"]

        producers = raw.call(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "watched", "partition_indexes": [0, 1]}]})
        idle, busy = producers.topics[0].partitions
        assert list(idle.active_producers) == []
        (state,) = busy.active_producers
        assert (state.producer_id, state.current_txn_start_offset) == (ongoing.producer_id, 0)

        producer.commit_transaction(TIMEOUT_S)
        for _ in range(100):  # the markers follow the EndTxn answer
            states = raw.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx-admin"]}).transaction_states
            if states[0].transaction_state == "CompleteCommit":
                break
        assert states[0].transaction_state == "CompleteCommit"
        producers = raw.call(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": "watched", "partition_indexes": [1]}]})
        assert producers.topics[0].partitions[0].active_producers[0].current_txn_start_offset == -1
    finally:
        raw.close()


def _transaction_coordinator_epoch(raw: RawClient, transactional_id: str) -> int:
    """The leader epoch of the id's ``__transaction_state`` partition: the coordinator epoch
    its markers carry."""
    response = raw.call(METADATA, 9, {"topics": [{"name": TRANSACTION_STATE_TOPIC}],
                                      "allow_auto_topic_creation": False, "include_cluster_authorized_operations": False,
                                      "include_topic_authorized_operations": False})
    (topic,) = response.topics
    wanted = partition_for(transactional_id, len(topic.partitions))
    (partition,) = [p for p in topic.partitions if p.partition_index == wanted]
    return int(partition.leader_epoch)


def _coordinator_epochs(broker, topic: str) -> dict[int, int]:
    """DescribeProducers' coordinator epoch per producer id of partition 0 (a fresh
    connection: the broker may have restarted)."""
    raw = RawClient(broker.host, broker.port)
    try:
        for _ in range(100):  # the log is loaded and led again after a restart
            answer = raw.call(DESCRIBE_PRODUCERS, 0, {"topics": [{"name": topic, "partition_indexes": [0]}]})
            partition = answer.topics[0].partitions[0]
            if partition.error_code == E.NONE:
                return {p.producer_id: p.coordinator_epoch for p in partition.active_producers}
            time.sleep(0.1)
        raise AssertionError(f"DescribeProducers answered {partition.error_code}")
    finally:
        raw.close()


def _commit_one(broker, topic: str, transactional_id: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(topic, value, partition=0)
    producer.commit_transaction(TIMEOUT_S)


def _wait_complete(broker, transactional_id: str) -> None:
    raw = RawClient(broker.host, broker.port)
    try:
        for _ in range(200):  # the markers follow the EndTxn answer
            states = raw.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}).transaction_states
            if states[0].transaction_state == "CompleteCommit":
                return
            time.sleep(0.05)
        raise AssertionError(f"{transactional_id} is {states[0].transaction_state}")
    finally:
        raw.close()


def test_describe_producers_reports_the_coordinator_epoch_of_the_last_marker(broker):
    create_topics(broker.bootstrap, 1, "epochs")
    _commit_one(broker, "epochs", "tx-epoch", b"one")
    _wait_complete(broker, "tx-epoch")
    raw = RawClient(broker.host, broker.port)
    try:
        first_epoch = _transaction_coordinator_epoch(raw, "tx-epoch")
        pid = raw.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["tx-epoch"]}).transaction_states[0].producer_id
    finally:
        raw.close()
    assert first_epoch >= 0
    assert _coordinator_epochs(broker, "epochs") == {pid: first_epoch}

    broker.restart()  # clean: from the producer-state snapshot written at shutdown
    assert _coordinator_epochs(broker, "epochs") == {pid: first_epoch}

    # A second transaction after the restart (the coordinator may have a new epoch now),
    # then a crash and no producer-state snapshot at all: the epochs are read back from
    # the markers in the log.
    _commit_one(broker, "epochs", "tx-epoch", b"two")
    _wait_complete(broker, "tx-epoch")
    raw = RawClient(broker.host, broker.port)
    try:
        second_epoch = _transaction_coordinator_epoch(raw, "tx-epoch")
    finally:
        raw.close()
    assert second_epoch >= first_epoch
    assert _coordinator_epochs(broker, "epochs") == {pid: second_epoch}
    broker.kill()
    snapshots = glob.glob(os.path.join(broker.log_dir, "epochs-0", "*.snapshot"))
    assert snapshots  # the one written at the clean shutdown
    for path in snapshots:
        os.unlink(path)
    broker.start()
    assert _coordinator_epochs(broker, "epochs") == {pid: second_epoch}


def test_list_transactions_duration_and_transactional_id_filters(broker):
    create_topics(broker.bootstrap, 1, "listed")
    producers = []
    for transactional_id in ("app-1", "app-2", "other"):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id})
        producer.init_transactions(TIMEOUT_S)
        producers.append(producer)
    producers[0].begin_transaction()  # only app-1 has a transaction open
    producers[0].produce("listed", b"x", partition=0)
    producers[0].flush(TIMEOUT_S)
    time.sleep(0.3)
    raw = RawClient(broker.host, broker.port)

    def listed(version: int, **filters: object) -> tuple[int, list[str]]:
        body = {"state_filters": [], "producer_id_filters": [], "duration_filter": -1,
                "transactional_id_pattern": None, **filters}
        answer = raw.call(LIST_TRANSACTIONS, version, body)
        return answer.error_code, sorted(t.transactional_id for t in answer.transaction_states)

    try:
        assert listed(0) == (E.NONE, ["app-1", "app-2", "other"])
        # v1: open longer than the filter (KIP-994)
        assert listed(1, duration_filter=100) == (E.NONE, ["app-1"])
        assert listed(1, duration_filter=600_000) == (E.NONE, [])
        assert listed(1, duration_filter=-1) == (E.NONE, ["app-1", "app-2", "other"])
        # v2: the whole id matches the pattern (KIP-1152); null or empty means every id
        assert listed(2, transactional_id_pattern="app-.*") == (E.NONE, ["app-1", "app-2"])
        assert listed(2, transactional_id_pattern="app") == (E.NONE, [])
        assert listed(2, transactional_id_pattern="") == (E.NONE, ["app-1", "app-2", "other"])
        assert listed(2, transactional_id_pattern=None) == (E.NONE, ["app-1", "app-2", "other"])
        assert listed(2, transactional_id_pattern="app-.*", duration_filter=100, state_filters=["Ongoing"]) \
            == (E.NONE, ["app-1"])
        assert listed(2, transactional_id_pattern="app-(") == (E.INVALID_REGULAR_EXPRESSION, [])
    finally:
        raw.close()
        producers[0].abort_transaction(TIMEOUT_S)
