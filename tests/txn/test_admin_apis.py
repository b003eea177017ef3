"""DescribeTransactions, ListTransactions and DescribeProducers over a transaction that
confluent-kafka's producer holds open, then commits."""

from __future__ import annotations

from confluent_kafka import Producer

from pykfk.errors import ErrorCode as E
from pykfk.testing import RawClient
from tests.txn.conftest import TIMEOUT_S, create_topics

DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


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
