"""confluent-kafka's transactional producer against a broker process: commit and abort
across partitions and topics, read_committed and read_uncommitted consumers, offsets
sent to the transaction, consumers held at the last stable offset."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.txn.conftest import TIMEOUT_S, create_topics, read_all


def transactional_producer(bootstrap: str, transactional_id: str, **conf: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **conf})
    producer.init_transactions(TIMEOUT_S)
    return producer


def test_committed_records_appear_once_and_aborted_ones_only_uncommitted(broker):
    create_topics(broker.bootstrap, 3, "orders", "audit")
    producer = transactional_producer(broker.bootstrap, "tx-commit-abort")
    producer.begin_transaction()
    for i in range(30):
        producer.produce("orders", b"c1-%d" % i, partition=i % 3)
    producer.produce("audit", b"audit-1", partition=2)
    producer.commit_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(12):
        producer.produce("orders", b"a-%d" % i, partition=i % 3)
    producer.produce("audit", b"audit-aborted", partition=0)
    producer.flush(TIMEOUT_S)  # written to the logs, then aborted
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    producer.produce("orders", b"c2", partition=1)
    producer.commit_transaction(TIMEOUT_S)

    committed = read_all(broker.bootstrap, "orders", 3, "read_committed")
    assert sorted(committed) == sorted([b"c1-%d" % i for i in range(30)] + [b"c2"])
    assert len(set(committed)) == len(committed)
    uncommitted = read_all(broker.bootstrap, "orders", 3, "read_uncommitted")
    assert sorted(uncommitted) == sorted(committed + [b"a-%d" % i for i in range(12)])
    assert read_all(broker.bootstrap, "audit", 3, "read_committed") == [b"audit-1"]


def test_read_committed_consumer_stops_at_the_open_transaction(broker):
    create_topics(broker.bootstrap, 1, "held")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("held", b"before", partition=0)
    plain.flush(TIMEOUT_S)
    producer = transactional_producer(broker.bootstrap, "tx-open")
    producer.begin_transaction()
    producer.produce("held", b"in-txn", partition=0)
    producer.flush(TIMEOUT_S)
    plain.produce("held", b"after", partition=0)  # past the open transaction's first offset
    plain.flush(TIMEOUT_S)
    assert read_all(broker.bootstrap, "held", 1, "read_committed") == [b"before"]
    assert read_all(broker.bootstrap, "held", 1, "read_uncommitted") == [b"before", b"in-txn", b"after"]
    producer.commit_transaction(TIMEOUT_S)
    assert read_all(broker.bootstrap, "held", 1, "read_committed") == [b"before", b"in-txn", b"after"]


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT_S)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def test_offsets_sent_to_the_transaction_count_only_when_it_commits(broker):
    create_topics(broker.bootstrap, 2, "source", "sink")
    producer = transactional_producer(broker.bootstrap, "tx-offsets")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "copier"})
    metadata = consumer.consumer_group_metadata()

    producer.begin_transaction()
    producer.produce("sink", b"x", partition=0)
    producer.send_offsets_to_transaction([TopicPartition("source", 0, 5), TopicPartition("source", 1, 7)],
                                         metadata, TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    assert committed_offsets(broker.bootstrap, "copier", "source", 2) == [-1001, -1001]  # none

    producer.begin_transaction()
    producer.produce("sink", b"y", partition=0)
    producer.send_offsets_to_transaction([TopicPartition("source", 0, 10), TopicPartition("source", 1, 3)],
                                         metadata, TIMEOUT_S)
    producer.commit_transaction(TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while committed_offsets(broker.bootstrap, "copier", "source", 2) != [10, 3]:
        assert time.monotonic() < deadline, "the committed transaction's offsets never showed"
        time.sleep(0.1)
    consumer.close()
    assert read_all(broker.bootstrap, "sink", 2, "read_committed") == [b"y"]
