"""Transactions v2 on a 3-broker ZooKeeper cluster, spoken to with raw requests at the
newest versions: a transactional Produce to a partition whose leader is not the
transaction coordinator has that leader add the partition through the coordinator
(AddPartitionsToTxn v4 without verify_only); and a coordinator killed (SIGKILL) while the
transaction ending at the exhausted epoch hands over a new producer id goes on with that
producer id once restarted (``__transaction_state`` has one replica here, so the
coordinator's broker reloads its own log)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import pytest

from pykfk.errors import ErrorCode as E
from pykfk.group.storage import LogOffsetsLog
from pykfk.log import Log, LogConfig
from pykfk.testing import RawClient, wait_until
from pykfk.txn.coordinator import MAX_PRODUCER_EPOCH
from pykfk.txn.records import TxnRecord, TxnState, encode_key, encode_value
from tests.cluster.conftest import Cluster

from .conftest import TIMEOUT_S, read_all
from .test_transactions_v2 import _end, _produce, _try_init

FIND_COORDINATOR, DESCRIBE_TRANSACTIONS = 10, 65
TXN_STATE = "__transaction_state"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper_server: Any) -> Iterator[Cluster]:
    made = Cluster(str(tmp_path_factory.mktemp("txn-v2-cluster")), zookeeper_server, 3, {
        # One partition with one replica: the coordinator is that partition's broker, and a
        # restart of it reloads its own log.
        "transaction.state.log.num.partitions": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
    }).start()
    try:
        yield made
    finally:
        made.close()


def _raw(cluster: Cluster, broker_id: int) -> RawClient:
    broker = cluster.brokers[broker_id]
    return RawClient(broker.host, broker.port)


def _coordinator(cluster: Cluster, transactional_id: str) -> int:
    """The id's coordinator (creating ``__transaction_state`` on first use)."""
    def found() -> list[int]:
        with closing(_raw(cluster, next(i for i, b in cluster.brokers.items() if b.is_running()))) as raw:
            answer = raw.call(FIND_COORDINATOR, 1, {"key": transactional_id, "key_type": 1})
        return [int(answer.node_id)] if answer.error_code == E.NONE else []

    return wait_until(found, TIMEOUT_S, f"the coordinator of {transactional_id}")[0]


def _topic_away_from(cluster: Cluster, prefix: str, coordinator: int) -> tuple[str, int]:
    """A one-partition topic (one replica) whose leader is not ``coordinator``: its name
    and leader. (CreateTopics takes an explicit assignment only for its partition count
    and replication factor, so topics are made until one lands elsewhere.)"""
    for attempt in range(12):
        name = f"{prefix}-{attempt}"
        cluster.create_topic(name, 1, 1)
        if cluster.leader(name, 0) != coordinator:
            return name, cluster.leader(name, 0)
    raise AssertionError(f"every topic landed on broker {coordinator}")


def _describe(raw: RawClient, transactional_id: str) -> Any:
    state = raw.call(DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}).transaction_states[0]
    return state if state.error_code == E.NONE else None


def _init(raw: RawClient, transactional_id: str) -> tuple[int, int]:
    return wait_until(lambda: _try_init(raw, transactional_id), TIMEOUT_S, f"InitProducerId of {transactional_id}")


def _ended(raw: RawClient, transactional_id: str, producer: tuple[int, int], commit: bool) -> tuple[int, int, int]:
    """EndTxn v5, retried while the coordinator (re)loads."""
    def attempt() -> tuple[int, int, int] | None:
        try:
            answer = _end(raw, transactional_id, producer, commit)
        except OSError:
            return None
        return None if answer[0] in (E.NOT_COORDINATOR, E.COORDINATOR_LOAD_IN_PROGRESS) else answer

    return wait_until(attempt, TIMEOUT_S, f"EndTxn of {transactional_id}")


def _produced(raw: RawClient, transactional_id: str, producer: tuple[int, int], topic: str,
              values: list[bytes]) -> None:
    """A transactional batch accepted; NOT_ENOUGH_REPLICAS (the coordinator could not add
    the partition yet: loading, or the last transaction still ending) is retried."""
    wait_until(lambda: _produce(raw, transactional_id, producer, topic, values) == E.NONE, TIMEOUT_S,
               f"{values} accepted")


def test_a_partition_led_elsewhere_is_added_through_the_coordinator(cluster: Cluster) -> None:
    tid = "v2-cross"
    coordinator = _coordinator(cluster, tid)
    topic, leader = _topic_away_from(cluster, "v2-cross", coordinator)
    with closing(_raw(cluster, coordinator)) as at_coordinator, closing(_raw(cluster, leader)) as at_leader:
        producer = _init(at_coordinator, tid)
        # No AddPartitionsToTxn from the producer: the leader asks the coordinator.
        assert _produce(at_leader, tid, producer, topic, [b"c0", b"c1"]) == E.NONE
        state = _describe(at_coordinator, tid)
        assert state.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
        code, pid, epoch = _end(at_coordinator, tid, producer, commit=True)
        assert (code, pid, epoch) == (E.NONE, producer[0], producer[1] + 1)
        assert wait_until(lambda: read_all(cluster.bootstrap, topic, 1, "read_committed") or None,
                          TIMEOUT_S, "the committed records") == [b"c0", b"c1"]
        # The next transaction, at the bumped epoch, aborted: hidden from read_committed.
        _produced(at_leader, tid, (pid, epoch), topic, [b"a0"])
        assert _end(at_coordinator, tid, (pid, epoch), commit=False) == (E.NONE, pid, epoch + 1)
        # The old epoch is fenced at the leader (the coordinator refuses to add for it).
        assert _produce(at_leader, tid, producer, topic, [b"zombie"]) in (
            E.INVALID_PRODUCER_EPOCH, E.PRODUCER_FENCED)
        # A third transaction commits, after the abort's marker.
        _produced(at_leader, tid, (pid, epoch + 1), topic, [b"c2"])
        assert _end(at_coordinator, tid, (pid, epoch + 1), commit=True) == (E.NONE, pid, epoch + 2)
    assert wait_until(lambda: [v for v in [read_all(cluster.bootstrap, topic, 1, "read_committed")]
                               if len(v) == 3], TIMEOUT_S, "the second commit read")[0] == [b"c0", b"c1", b"c2"]
    assert read_all(cluster.bootstrap, topic, 1, "read_uncommitted") == [b"c0", b"c1", b"a0", b"c2"]


def _store_epoch(cluster: Cluster, broker_id: int, transactional_id: str, producer_id: int, epoch: int) -> None:
    """Appends to the stopped coordinator's ``__transaction_state-0`` the state of an id
    that has ended ``epoch`` transactions (what 32,766 EndTxn would leave)."""
    log = Log(os.path.join(cluster.brokers[broker_id].log_dir, f"{TXN_STATE}-0"), LogConfig(cleanup_policy="compact"))
    try:
        now = int(time.time() * 1000)
        record = TxnRecord(producer_id, epoch, 30000, TxnState.COMPLETE_ABORT, frozenset(), now, -1,
                           previous_producer_id=producer_id, client_transaction_version=2)
        asyncio.run(LogOffsetsLog(log).append([(encode_key(transactional_id), encode_value(record))]))
    finally:
        log.close()


def test_a_coordinator_killed_while_it_hands_over_a_producer_id(cluster: Cluster) -> None:
    tid = "v2-handover"
    coordinator = _coordinator(cluster, tid)
    topic, leader = _topic_away_from(cluster, "v2-handover", coordinator)
    last = MAX_PRODUCER_EPOCH - 1
    with closing(_raw(cluster, coordinator)) as raw:
        pid, _epoch = _init(raw, tid)
    cluster.brokers[coordinator].stop()
    _store_epoch(cluster, coordinator, tid, pid, last)
    cluster.brokers[coordinator].start(timeout=60)

    at_coordinator = _raw(cluster, coordinator)
    at_leader = _raw(cluster, leader)
    try:
        described = wait_until(lambda: _describe(at_coordinator, tid), TIMEOUT_S, "the id loaded")
        assert (described.producer_id, described.producer_epoch) == (pid, last)
        _produced(at_leader, tid, (pid, last), topic, [b"last-epoch"])
        at_leader.close()
        # The data's leader dies: the commit's marker cannot be written, so the state
        # stays PrepareCommit, with the new producer id handed over in it.
        cluster.brokers[leader].kill()
        code, new_pid, new_epoch = _end(at_coordinator, tid, (pid, last), commit=True)
        assert (code, new_epoch) == (E.NONE, 0) and new_pid != pid
        at_coordinator.close()
        cluster.brokers[coordinator].kill()
        cluster.brokers[coordinator].start(timeout=60)
        at_coordinator = _raw(cluster, coordinator)
        # Reloaded from the log: the retried EndTxn gets the same answer, and the
        # transaction is still being committed.
        assert _ended(at_coordinator, tid, (pid, last), commit=True) == (E.NONE, new_pid, 0)
        assert _describe(at_coordinator, tid).transaction_state == "PrepareCommit"
        cluster.brokers[leader].start(timeout=60)
        settled = wait_until(lambda: [s for s in [_describe(at_coordinator, tid)]
                                      if s.transaction_state == "CompleteCommit"], TIMEOUT_S,
                             "the commit's marker written once the leader is back")[0]
        assert (settled.producer_id, settled.producer_epoch) == (new_pid, 0)
        # The producer goes on with the new producer id: not fenced.
        at_leader = _raw(cluster, leader)
        _produced(at_leader, tid, (new_pid, 0), topic, [b"new-id"])
        assert _end(at_coordinator, tid, (new_pid, 0), commit=True) == (E.NONE, new_pid, 1)
        # Still the same answer to the old producer id's retry, killed again after the hand-over.
        at_coordinator.close()
        cluster.brokers[coordinator].kill()
        cluster.brokers[coordinator].start(timeout=60)
        at_coordinator = _raw(cluster, coordinator)
        assert _ended(at_coordinator, tid, (new_pid, 0), commit=True) == (E.NONE, new_pid, 1)
        assert _end(at_coordinator, tid, (pid, last), commit=True)[0] == E.INVALID_PRODUCER_ID_MAPPING
    finally:
        at_coordinator.close()
        at_leader.close()
    assert wait_until(lambda: [v for v in [read_all(cluster.bootstrap, topic, 1, "read_committed")]
                               if len(v) == 2], TIMEOUT_S, "both commits read")[0] == [b"last-epoch", b"new-id"]
