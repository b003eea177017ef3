"""Zombie fencing, a hung producer aborted after its transaction.timeout.ms, and a broker
killed with SIGKILL in the middle of a transaction: every transaction ends committed or
aborted, never half visible, and read_committed consumers move on."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from tests.txn.conftest import TIMEOUT_S, create_topics, read_all
from tests.txn.lso_sampler import LsoSampler


def transactional_producer(bootstrap: str, transactional_id: str, **conf: object) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, **conf})
    producer.init_transactions(TIMEOUT_S)
    return producer


def test_the_older_producer_of_a_transactional_id_is_fenced(broker):
    create_topics(broker.bootstrap, 2, "zombies")
    zombie = transactional_producer(broker.bootstrap, "tx-shared")
    zombie.begin_transaction()
    zombie.produce("zombies", b"zombie-1", partition=0)
    zombie.flush(TIMEOUT_S)

    successor = transactional_producer(broker.bootstrap, "tx-shared")  # aborts the zombie's transaction
    successor.begin_transaction()
    successor.produce("zombies", b"successor", partition=1)
    successor.commit_transaction(TIMEOUT_S)

    zombie.produce("zombies", b"zombie-2", partition=1)
    with pytest.raises(KafkaException) as caught:
        zombie.commit_transaction(TIMEOUT_S)
    assert caught.value.args[0].fatal() or caught.value.args[0].txn_requires_abort()
    assert read_all(broker.bootstrap, "zombies", 2, "read_committed") == [b"successor"]


def test_a_hung_transaction_is_aborted_after_its_timeout(broker):
    create_topics(broker.bootstrap, 1, "hung")
    hung = transactional_producer(broker.bootstrap, "tx-hung", **{"transaction.timeout.ms": 1500})
    hung.begin_transaction()
    hung.produce("hung", b"never-committed", partition=0)
    hung.flush(TIMEOUT_S)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("hung", b"later", partition=0)
    plain.flush(TIMEOUT_S)
    # Held at the open transaction first; once the coordinator aborts it (about 1.5 s
    # later) the last stable offset moves past "later".
    assert read_all(broker.bootstrap, "hung", 1, "read_uncommitted") == [b"never-committed", b"later"]
    deadline_reads = 0
    while read_all(broker.bootstrap, "hung", 1, "read_committed") != [b"later"]:
        deadline_reads += 1
        assert deadline_reads < 100, "the timed-out transaction was never aborted"
    with pytest.raises(KafkaException):
        hung.commit_transaction(TIMEOUT_S)


def test_broker_killed_mid_transaction_then_committed(broker):
    create_topics(broker.bootstrap, 3, "crash")
    sampler = LsoSampler({0: (broker.host, broker.port)}, "crash", 3).start()
    try:
        producer = transactional_producer(broker.bootstrap, "tx-crash")
        producer.begin_transaction()
        for i in range(30):
            producer.produce("crash", b"r-%d" % i, partition=i % 3)
        producer.flush(TIMEOUT_S)
        broker.restart(clean=False)  # SIGKILL, then start again on the same port
        assert read_all(broker.bootstrap, "crash", 3, "read_committed") == []
        producer.commit_transaction(TIMEOUT_S)
        committed = read_all(broker.bootstrap, "crash", 3, "read_committed")
        assert sorted(committed) == sorted(b"r-%d" % i for i in range(30))
    finally:
        sampler.stop()
    # The last stable offset stayed at the open transaction across the restart, then
    # moved past its commit marker, never back.
    assert not sampler.failures, sampler.failures
    assert not sampler.regressions(), f"the LSO went back: {sampler.regressions()}"
    assert {s.lso for p in range(3) for s in sampler.good(p)} <= {0, 11}


def test_broker_killed_with_an_abandoned_transaction_aborts_it_after_restart(broker):
    create_topics(broker.bootstrap, 1, "abandoned")
    producer = transactional_producer(broker.bootstrap, "tx-abandoned", **{"transaction.timeout.ms": 1500})
    producer.begin_transaction()
    producer.produce("abandoned", b"lost", partition=0)
    producer.flush(TIMEOUT_S)
    del producer
    broker.restart(clean=False)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("abandoned", b"kept", partition=0)
    plain.flush(TIMEOUT_S)
    reads = 0
    while read_all(broker.bootstrap, "abandoned", 1, "read_committed") != [b"kept"]:
        reads += 1
        assert reads < 100, "the abandoned transaction was never aborted"
