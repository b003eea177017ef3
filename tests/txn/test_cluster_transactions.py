"""Transactions on a 3-broker ZooKeeper cluster: markers cross brokers (WriteTxnMarkers
from the coordinator to partition leaders), and brokers are killed with SIGKILL in the
middle of a transaction: a partition's leader right after a commit moved its last stable
offset, then the coordinator's broker (``__transaction_state`` leadership moves, the new
coordinator replays it). Each transaction commits whole, and the last stable offset each
partition's leader reports meanwhile never goes back, nor past a transaction's start
before the high watermark is past its marker."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from pykfk.group.offsets import partition_for
from pykfk.testing import wait_until
from tests.cluster.conftest import Cluster
from tests.txn.conftest import TIMEOUT_S, read_all
from tests.txn.lso_sampler import LsoSampler

TXN_PARTITIONS = 3
TRANSACTIONAL_ID = "tx-cluster"


def test_coordinator_broker_killed_mid_transaction(tmp_path: Any, zookeeper_server: Any) -> None:
    cluster = Cluster(str(tmp_path), zookeeper_server, 3, {
        "transaction.state.log.num.partitions": TXN_PARTITIONS,
        "transaction.state.log.replication.factor": 3,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    }).start()
    sampler: LsoSampler | None = None
    try:
        cluster.create_topic("orders", 3, 3, **{"min.insync.replicas": 2})
        sampler = LsoSampler({i: (b.host, b.port) for i, b in cluster.brokers.items()}, "orders", 3).start()
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": TRANSACTIONAL_ID})
        producer.init_transactions(TIMEOUT_S)
        state_partition = partition_for(TRANSACTIONAL_ID, TXN_PARTITIONS)
        cluster.wait_for_full_isr("__transaction_state", TXN_PARTITIONS)
        coordinator = cluster.leader("__transaction_state", state_partition)

        # Markers to leaders on other brokers.
        producer.begin_transaction()
        for i in range(30):
            producer.produce("orders", b"first-%d" % i, partition=i % 3)
        producer.commit_transaction(TIMEOUT_S)
        expected = [b"first-%d" % i for i in range(30)]

        # A partition's leader dies just after it answered the LSO past the commit marker
        # (within replica.fetch.wait.max.ms), with the next transaction open elsewhere.
        # Its followers learn the high watermark one fetch late, so the new leader must
        # not answer an older LSO meanwhile (OFFSET_NOT_AVAILABLE until its high
        # watermark reaches the start of its epoch).
        target = next(p for p in range(3) if cluster.leader("orders", p) != coordinator)
        victim = cluster.leader("orders", target)
        wait_until(lambda: any(s.lso == 11 and s.broker == victim for s in sampler.good(target)), 10,
                   f"the LSO past the commit at the leader of orders-{target}", 0.005)
        others = [p for p in range(3) if cluster.leader("orders", p) != victim]
        producer.begin_transaction()
        for i in range(30):
            if i % 3 in others:
                producer.produce("orders", b"moved-%d" % i, partition=i % 3)
        producer.flush(TIMEOUT_S)
        cluster.brokers[victim].kill()
        wait_until(lambda: any(s.broker != victim for s in sampler.good(target)), 30,
                   f"an LSO from the new leader of orders-{target}")
        producer.commit_transaction(TIMEOUT_S)
        expected += [b"moved-%d" % i for i in range(30) if i % 3 in others]
        assert sorted(read_all(cluster.bootstrap, "orders", 3, "read_committed")) == sorted(expected)
        cluster.brokers[victim].start(timeout=60)
        cluster.wait_for_full_isr("orders", 3)
        cluster.wait_for_full_isr("__transaction_state", TXN_PARTITIONS)

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
        expected += [b"second-%d" % i for i in range(30)]
        assert sorted(committed) == sorted(expected)

        # And it keeps coordinating: an aborted transaction stays invisible.
        producer.begin_transaction()
        producer.produce("orders", b"aborted", partition=0)
        producer.flush(TIMEOUT_S)
        producer.abort_transaction(TIMEOUT_S)
        assert sorted(read_all(cluster.bootstrap, "orders", 3, "read_committed")) == sorted(expected)

        samples = sampler.stop()
        assert not sampler.failures, sampler.failures
        assert not sampler.regressions(), f"the LSO went back: {sampler.regressions()}"
        # Each partition's first transaction is offsets 0-9 with its marker at 10: the LSO is
        # 0 until the high watermark passes the marker, then 11, never in between (a leader
        # that answered 10 before its followers had the marker could hand over an LSO of 0).
        inside = [s for s in samples if s.error == 0 and 0 < s.lso < 11]
        assert not inside, f"an LSO inside the first transaction: {inside}"
        for p in range(3):  # every partition answered to the end, from whoever leads it
            assert any(s.at > samples[-1].at - 2 for s in sampler.good(p)), f"orders-{p} stopped answering"
    finally:
        if sampler is not None:
            sampler.stop()
        cluster.close()


def test_leaders_ask_the_coordinator_on_another_broker(tmp_path: Any, zookeeper_server: Any) -> None:
    """A transactional write to a partition led by a broker that does not coordinate the
    id is checked with the coordinator (AddPartitionsToTxn v4, verify_only): refused with
    INVALID_TXN_STATE before AddPartitionsToTxn, accepted after; nothing half written."""
    from pykfk._core.records import build_batch
    from pykfk.errors import ErrorCode
    from pykfk.testing import RawClient

    cluster = Cluster(str(tmp_path), zookeeper_server, 3, {
        "transaction.state.log.num.partitions": TXN_PARTITIONS,
        "transaction.state.log.replication.factor": 3,
    }).start()
    clients: list[RawClient] = []
    try:
        cluster.create_topic("checked", 3, 1)
        some = cluster.brokers[0]
        raw = RawClient(some.host, some.port)
        clients.append(raw)
        found = raw.call(10, 1, {"key": TRANSACTIONAL_ID, "key_type": 1})
        wait_until(lambda: cluster.leader("__transaction_state", partition_for(TRANSACTIONAL_ID, TXN_PARTITIONS)) >= 0,
                   60, "a transaction coordinator")
        coordinator_id = cluster.leader("__transaction_state", partition_for(TRANSACTIONAL_ID, TXN_PARTITIONS))
        coordinator = RawClient(cluster.brokers[coordinator_id].host, cluster.brokers[coordinator_id].port)
        clients.append(coordinator)
        assert found.error_code == ErrorCode.NONE

        def init() -> Any:
            """InitProducerId's answer once the coordinator has loaded the id (else None)."""
            answer = coordinator.call(22, 4, {"transactional_id": TRANSACTIONAL_ID, "transaction_timeout_ms": 60000,
                                              "producer_id": -1, "producer_epoch": -1})
            return answer if answer.error_code == ErrorCode.NONE else None

        answer = wait_until(init, 60, "InitProducerId at the coordinator")
        pid, epoch = answer.producer_id, answer.producer_epoch
        partition = next(p for p in range(3) if cluster.leader("checked", p) != coordinator_id)
        leader = cluster.brokers[cluster.leader("checked", partition)]
        at_leader = RawClient(leader.host, leader.port)
        clients.append(at_leader)

        def produce(sequence: int) -> int:
            batch = build_batch([(b"k", b"v", 1000, [])], producer_id=pid, producer_epoch=epoch,
                                base_sequence=sequence, is_transactional=True)
            body = {"transactional_id": TRANSACTIONAL_ID, "acks": -1, "timeout_ms": 5000,
                    "topic_data": [{"name": "checked", "partition_data": [{"index": partition, "records": batch}]}]}
            return int(at_leader.call(0, 7, body).responses[0].partition_responses[0].error_code)

        assert produce(0) == ErrorCode.INVALID_TXN_STATE
        added = coordinator.call(24, 3, {"v3_and_below_transactional_id": TRANSACTIONAL_ID,
                                         "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
                                         "v3_and_below_topics": [{"name": "checked", "partitions": [partition]}]})
        assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.NONE
        assert produce(0) == ErrorCode.NONE
        assert produce(1) == ErrorCode.NONE  # the partition holds the transaction now: no asking
    finally:
        for client in clients:
            client.close()
        cluster.close()
