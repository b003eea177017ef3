"""Transactions on a 3-broker ZooKeeper cluster: markers cross brokers (WriteTxnMarkers
from the coordinator to partition leaders), and the coordinator's broker is killed with
SIGKILL in the middle of a transaction: ``__transaction_state`` leadership moves, the new
coordinator replays it, and the transaction commits whole."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from pykfk.group.offsets import partition_for
from tests.cluster.conftest import Cluster, wait_until
from tests.txn.conftest import TIMEOUT_S, read_all

TXN_PARTITIONS = 3
TRANSACTIONAL_ID = "tx-cluster"


def test_coordinator_broker_killed_mid_transaction(tmp_path: Any, zookeeper_server: Any) -> None:
    cluster = Cluster(str(tmp_path), zookeeper_server, 3, {
        "transaction.state.log.num.partitions": TXN_PARTITIONS,
        "transaction.state.log.replication.factor": 3,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    }).start()
    try:
        cluster.create_topic("orders", 3, 3, **{"min.insync.replicas": 2})
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TRANSACTIONAL_ID})
        producer.init_transactions(TIMEOUT_S)
        state_partition = partition_for(TRANSACTIONAL_ID, TXN_PARTITIONS)
        cluster.wait_for_full_isr("__transaction_state", TXN_PARTITIONS)

        # Markers to leaders on other brokers.
        producer.begin_transaction()
        for i in range(30):
            producer.produce("orders", b"first-%d" % i, partition=i % 3)
        producer.commit_transaction(TIMEOUT_S)
        assert sorted(read_all(cluster.bootstrap, "orders", 3, "read_committed")) == sorted(
            b"first-%d" % i for i in range(30))

        # The coordinator dies with a transaction open; its successor finishes it.
        producer.begin_transaction()
        for i in range(30):
            producer.produce("orders", b"second-%d" % i, partition=i % 3)
        producer.flush(TIMEOUT_S)
        coordinator = cluster.leader("__transaction_state", state_partition)
        cluster.brokers[coordinator].kill()
        wait_until(lambda: cluster.leader("__transaction_state", state_partition) not in (-1, coordinator), 60,
                   "a new transaction coordinator")
        producer.commit_transaction(TIMEOUT_S)
        committed = read_all(cluster.bootstrap, "orders", 3, "read_committed")
        expected = [b"first-%d" % i for i in range(30)] + [b"second-%d" % i for i in range(30)]
        assert sorted(committed) == sorted(expected)

        # And it keeps coordinating: an aborted transaction stays invisible.
        producer.begin_transaction()
        producer.produce("orders", b"aborted", partition=0)
        producer.flush(TIMEOUT_S)
        producer.abort_transaction(TIMEOUT_S)
        assert sorted(read_all(cluster.bootstrap, "orders", 3, "read_committed")) == sorted(expected)
    finally:
        cluster.close()
