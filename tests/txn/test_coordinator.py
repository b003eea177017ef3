"""The transaction coordinator on its own, with a ManualClock, in-memory storage and a
recording marker writer: state changes, the KIP-360 retry rule, timeouts, id expiry and
a reload that resumes a transaction left preparing its commit."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from pykfk.clock import ManualClock
from pykfk.cluster.metadata import MetadataWriteError
from pykfk.errors import ErrorCode as E
from pykfk.group.storage import MemoryOffsetsLog
from pykfk.txn import coordinator as coordinator_module
from pykfk.txn.coordinator import TransactionCoordinator, TxnConfig
from pykfk.txn.records import TxnState, decode_key, decode_value

PARTITIONS = 1


class RecordingMarkers:
    """Writes nothing; remembers each call. ``fail`` partitions answer NOT_LEADER."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool, frozenset[tuple[str, int]]]] = []
        self.fail: set[tuple[str, int]] = set()
        # While set and not open, a write waits for it (markers slow to be written).
        self.gate: asyncio.Event | None = None

    async def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        targets = frozenset(partitions)
        if self.gate is not None:
            await self.gate.wait()
        self.calls.append((producer_id, producer_epoch, commit, targets))
        return {tp: int(E.NOT_LEADER_OR_FOLLOWER if tp in self.fail else E.NONE) for tp in targets}


class Ids:
    """Producer ids from 1001; while ``unsaved``, the store's answer when it could not
    save a new block."""

    def __init__(self) -> None:
        self.next = 1000
        self.unsaved = False

    async def __call__(self) -> int:
        if self.unsaved:
            raise MetadataWriteError(E.KAFKA_STORAGE_ERROR, "the metadata change could not be saved")
        self.next += 1
        return self.next


@pytest.fixture
async def setup():
    clock = ManualClock()
    markers = RecordingMarkers()
    storage = MemoryOffsetsLog()
    coordinator = TransactionCoordinator(TxnConfig(num_partitions=PARTITIONS, max_timeout_ms=60000,
                                                   id_expiration_ms=3_600_000),
                                         allocate_producer_id=Ids(), markers=markers, clock=clock)
    await coordinator.start()
    await coordinator.load_partition(0, storage, coordinator_epoch=5)
    yield coordinator, markers, storage, clock
    await coordinator.shutdown()


async def test_a_transaction_from_init_to_complete_commit(setup):
    coordinator, markers, storage, _clock = setup
    code, pid, epoch = await coordinator.init_producer_id("tx", 10000)
    assert (code, epoch) == (E.NONE, 0)
    assert await coordinator.add_partitions("tx", pid, epoch, [("t", 0), ("t", 1)]) == E.NONE
    assert coordinator.verify_partition("tx", pid, epoch, ("t", 1)) == E.NONE
    assert coordinator.verify_partition("tx", pid, epoch, ("t", 2)) == E.INVALID_TXN_STATE
    assert await coordinator.end_transaction("tx", pid, epoch, commit=True) == E.NONE
    await coordinator.wait_completed("tx")
    assert markers.calls == [(pid, 0, True, frozenset({("t", 0), ("t", 1)}))]
    states = [decode_value(v).state for k, v in storage.records if decode_key(k) == "tx" and v is not None]
    assert states == [TxnState.EMPTY, TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    assert await coordinator.end_transaction("tx", pid, epoch, commit=True) == E.NONE  # a retry
    assert await coordinator.end_transaction("tx", pid, epoch, commit=False) == E.INVALID_TXN_STATE


async def test_the_next_transaction_waits_for_the_markers_of_the_last_instead_of_bouncing(setup, monkeypatch):
    coordinator, markers, storage, _clock = setup
    _code, pid, epoch = await coordinator.init_producer_id("tx", 10000)
    assert await coordinator.add_partitions("tx", pid, epoch, [("t", 0)]) == E.NONE
    markers.gate = asyncio.Event()
    assert await coordinator.end_transaction("tx", pid, epoch, commit=True) == E.NONE
    # The producer's next AddPartitionsToTxn comes while the markers are being written:
    # it is answered once they are, for the new transaction, not CONCURRENT_TRANSACTIONS.
    opening = asyncio.ensure_future(coordinator.add_partitions("tx", pid, epoch, [("t", 1)]))
    await asyncio.sleep(0.05)
    assert not opening.done()
    assert coordinator.txns["tx"].state == TxnState.PREPARE_COMMIT
    markers.gate.set()
    assert await asyncio.wait_for(opening, 5) == E.NONE
    assert coordinator.txns["tx"].state == TxnState.ONGOING
    assert coordinator.txns["tx"].partitions == {("t", 1)}
    states = [decode_value(v).state for k, v in storage.records if decode_key(k) == "tx" and v is not None]
    assert states[-3:] == [TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT, TxnState.ONGOING]
    # Markers that take longer than the wait: CONCURRENT_TRANSACTIONS, the client retries.
    monkeypatch.setattr(coordinator_module, "COMPLETION_WAIT_S", 0.05)
    markers.gate = asyncio.Event()
    assert await coordinator.end_transaction("tx", pid, epoch, commit=False) == E.NONE
    assert await coordinator.add_partitions("tx", pid, epoch, [("t", 2)]) == E.CONCURRENT_TRANSACTIONS
    assert await coordinator.init_producer_id("tx", 10000) == (E.CONCURRENT_TRANSACTIONS, -1, -1)
    markers.gate.set()
    await coordinator.wait_completed("tx")
    assert coordinator.txns["tx"].state == TxnState.COMPLETE_ABORT


async def test_init_bumps_the_epoch_and_a_retried_bump_gets_the_same_answer(setup):
    coordinator, _markers, _storage, _clock = setup
    _code, pid, epoch = await coordinator.init_producer_id("tx", 10000)
    code, pid2, epoch2 = await coordinator.init_producer_id("tx", 10000, pid, epoch)
    assert (code, pid2, epoch2) == (E.NONE, pid, 1)
    # The producer did not get the answer and asks again with its old epoch (KIP-360).
    assert await coordinator.init_producer_id("tx", 10000, pid, epoch) == (E.NONE, pid, 1)
    assert (await coordinator.init_producer_id("tx", 10000, pid + 5, 1))[0] == E.PRODUCER_FENCED


async def test_no_producer_id_to_hand_out_is_answered_coordinator_load_in_progress(setup):
    coordinator, _markers, storage, _clock = setup
    coordinator.allocate_producer_id.unsaved = True
    assert await coordinator.init_producer_id("tx", 10000) == (E.COORDINATOR_LOAD_IN_PROGRESS, -1, -1)
    assert "tx" not in coordinator.txns and storage.records == []
    coordinator.allocate_producer_id.unsaved = False
    assert await coordinator.init_producer_id("tx", 10000) == (E.NONE, 1001, 0)


async def test_open_transaction_is_aborted_after_its_timeout_with_an_epoch_bump(setup):
    coordinator, markers, _storage, clock = setup
    _code, pid, epoch = await coordinator.init_producer_id("tx", 10000)
    await coordinator.add_partitions("tx", pid, epoch, [("t", 0)])
    clock.advance(9_999)
    assert await coordinator.abort_timed_out() == 0
    clock.advance(2)
    assert await coordinator.abort_timed_out() == 1
    await coordinator.wait_completed("tx")
    assert markers.calls == [(pid, epoch + 1, False, frozenset({("t", 0)}))]
    assert coordinator.txns["tx"].state == TxnState.COMPLETE_ABORT
    assert await coordinator.end_transaction("tx", pid, epoch, commit=True) == E.PRODUCER_FENCED


async def test_idle_transactional_ids_expire(setup):
    coordinator, _markers, storage, clock = setup
    await coordinator.init_producer_id("old", 10000)
    clock.advance(3_000_000)
    await coordinator.init_producer_id("recent", 10000)
    clock.advance(600_001)
    assert await coordinator.expire_transactional_ids() == 1
    assert set(coordinator.txns) == {"recent"}
    assert storage.records[-1] == (storage.records[0][0], None)  # the tombstone of "old"


async def test_reload_resumes_the_markers_of_a_preparing_transaction(setup):
    coordinator, markers, storage, _clock = setup
    _code, pid, epoch = await coordinator.init_producer_id("tx", 10000)
    await coordinator.add_partitions("tx", pid, epoch, [("t", 3)])
    markers.fail.add(("t", 3))  # the markers cannot be written yet
    assert await coordinator.end_transaction("tx", pid, epoch, commit=True) == E.NONE
    await coordinator.unload_partition(0)  # leadership moves away before they are
    assert coordinator.txns == {}
    markers.fail.clear()
    await coordinator.load_partition(0, storage, coordinator_epoch=6)
    assert coordinator.txns["tx"].state == TxnState.PREPARE_COMMIT
    await coordinator.wait_completed("tx")
    assert coordinator.txns["tx"].state == TxnState.COMPLETE_COMMIT
    assert markers.calls[-1] == (pid, epoch, True, frozenset({("t", 3)}))


async def test_requests_for_partitions_not_loaded_here(setup):
    coordinator, _markers, _storage, _clock = setup
    await coordinator.unload_partition(0)
    assert (await coordinator.init_producer_id("tx", 10000))[0] == E.NOT_COORDINATOR
    assert (await coordinator.init_producer_id("tx", 60001))[0] == E.INVALID_TRANSACTION_TIMEOUT
