"""A transaction open on a 3-broker ZooKeeper cluster (replication 3, min.insync.replicas
2) when a broker dies with SIGKILL: first the transaction coordinator's broker, then a
broker that leads one of the transaction's partitions but does not coordinate it. Each
time the producer aborts (the new coordinator replays ``__transaction_state`` and ends
the open transaction, its markers going to whoever leads each partition now), then
commits the next transaction, and a read_committed consumer sees exactly the commits.
A state write of the coordinator that fails without a definite answer (no quorum yet,
a timeout) stays pending and is written again, as Kafka keeps such a transition: the
client's retries get CONCURRENT_TRANSACTIONS meanwhile, never the state before it."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Producer

from pykfk.group.offsets import partition_for
from tests.cluster.conftest import Cluster
from tests.txn.conftest import TIMEOUT_S, read_all

TXN_PARTITIONS = 3
TRANSACTIONAL_ID = "tx-failover-abort"
# An abort or commit after a failover: the coordinator moves within a few seconds.
END_TIMEOUT_S = 40


def _end(producer: Producer, commit: bool) -> float:
    """Ends the open transaction; returns how long it took."""
    began = time.monotonic()
    if commit:
        producer.commit_transaction(END_TIMEOUT_S)
    else:
        producer.abort_transaction(END_TIMEOUT_S)
    return time.monotonic() - began


def test_abort_after_a_broker_of_the_transaction_dies(tmp_path: Any, zookeeper_server: Any) -> None:
    cluster = Cluster(str(tmp_path), zookeeper_server, 3, {
        "transaction.state.log.num.partitions": TXN_PARTITIONS,
        "transaction.state.log.replication.factor": 3,
        # State writes give up on a dead replica before the ISR drops it (4 s here).
        "offsets.commit.timeout.ms": 2000,
    }).start()
    try:
        cluster.create_topic("events", 3, 3, **{"min.insync.replicas": 2})
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TRANSACTIONAL_ID,
                             "acks": "all", "linger.ms": 5})
        producer.init_transactions(TIMEOUT_S)
        state_partition = partition_for(TRANSACTIONAL_ID, TXN_PARTITIONS)
        cluster.wait_for_full_isr("__transaction_state", TXN_PARTITIONS)
        cluster.wait_for_full_isr("events", 3)
        expected: list[bytes] = []

        def transaction(tag: str, commit: bool) -> None:
            producer.begin_transaction()
            for i in range(30):
                producer.produce("events", b"%s-%d" % (tag.encode(), i), partition=i % 3)
            producer.flush(TIMEOUT_S)
            _end(producer, commit)
            if commit:
                expected.extend(b"%s-%d" % (tag.encode(), i) for i in range(30))

        transaction("before", commit=True)

        # 1. The coordinator's broker dies with the transaction open on every partition.
        coordinator = cluster.leader("__transaction_state", state_partition)
        producer.begin_transaction()
        for i in range(30):
            producer.produce("events", b"open-%d" % i, partition=i % 3)
        producer.flush(TIMEOUT_S)
        cluster.brokers[coordinator].kill()
        took = _end(producer, commit=False)
        assert took < END_TIMEOUT_S
        transaction("after-coordinator", commit=True)
        assert sorted(read_all(cluster.bootstrap, "events", 3, "read_committed")) == sorted(expected)
        cluster.brokers[coordinator].start(timeout=60)
        cluster.wait_for_full_isr("events", 3)
        cluster.wait_for_full_isr("__transaction_state", TXN_PARTITIONS)

        # 2. A leader of one of its partitions dies, not the coordinator, just before the
        # transaction opens: the coordinator's state writes wait for the dead replica in
        # the ISR of ``__transaction_state`` and time out, so AddPartitionsToTxn is
        # answered COORDINATOR_NOT_AVAILABLE while its record is in the log. The abort
        # that follows must find the transaction open, not fail with INVALID_TXN_STATE.
        coordinator = cluster.leader("__transaction_state", state_partition)
        victim = next(cluster.leader("events", p) for p in range(3) if cluster.leader("events", p) != coordinator)
        cluster.brokers[victim].kill()
        producer.begin_transaction()
        for i in range(30):
            producer.produce("events", b"doomed-%d" % i, partition=i % 3)
        time.sleep(0.5)  # AddPartitionsToTxn sent, its state write waiting for the ISR
        took = _end(producer, commit=False)
        assert took < END_TIMEOUT_S
        transaction("after-leader", commit=True)
        assert sorted(read_all(cluster.bootstrap, "events", 3, "read_committed")) == sorted(expected)
    finally:
        cluster.close()
