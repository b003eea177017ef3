"""Idempotent producer state: duplicates, sequence gaps, epochs, snapshots, rebuild."""

from __future__ import annotations

import os
import random
import struct

import pytest

from pykfk._core import records
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log import Log, LogConfig
from pykfk.log.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerBatch,
    ProducerStateManager,
    SnapshotError,
    increment_sequence,
    list_snapshots,
)
from pykfk.log.transactions import marker_batch

from .helpers import batch, read_records

PID = 4242


def pb(first_seq, count=1, *, pid=PID, epoch=0, first_offset=-1):
    last_seq = increment_sequence(first_seq, count - 1)
    last_offset = first_offset + count - 1 if first_offset >= 0 else -1
    return ProducerBatch(pid, epoch, first_seq, last_seq, 1000, first_offset, last_offset)


def code_of(state, *batches):
    with pytest.raises(KafkaError) as err:
        state.check(batches)
    return err.value.code


def test_sequence_rules():
    state = ProducerStateManager()
    assert code_of(state, pb(5)) == ErrorCode.UNKNOWN_PRODUCER_ID  # unknown, not from 0
    assert state.check([pb(0, 3)]) is None
    state.update([pb(0, 3, first_offset=0)])
    assert code_of(state, pb(4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # gap (3 missing)
    assert code_of(state, pb(2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # overlaps
    assert state.check([pb(3)]) is None
    # Several batches of one producer in one append are checked against each other.
    assert state.check([pb(3), pb(4, 2), pb(6)]) is None
    assert code_of(state, pb(3), pb(5)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_epochs():
    state = ProducerStateManager()
    state.update([pb(0, 2, epoch=3, first_offset=0)])
    assert code_of(state, pb(2, epoch=2)) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert code_of(state, pb(2, epoch=4)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert state.check([pb(0, epoch=4)]) is None  # a new epoch restarts at 0
    state.update([pb(0, epoch=4, first_offset=2)])
    entry = state.last_entry(PID)
    assert entry.producer_epoch == 4 and len(entry.batches) == 1
    assert code_of(state, pb(0, epoch=3)) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_duplicates_of_the_last_five_batches_return_their_offsets():
    state = ProducerStateManager()
    for i in range(7):
        state.update([pb(2 * i, 2, first_offset=10 + 2 * i)])
    dup = state.check([pb(8, 2)])
    assert (dup.first_offset, dup.last_offset) == (18, 19)
    assert state.check([pb(4, 2)]).first_offset == 14  # fifth from the end
    # The batch before the retained five is no longer recognised: out of order.
    assert code_of(state, pb(2, 2)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    # Same sequences under another epoch are not duplicates.
    assert code_of(state, pb(8, 2, epoch=1)) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_wraps_after_int32_max():
    state = ProducerStateManager()
    state.update([pb(0, first_offset=0)])
    state.producers[PID].batches[-1] = BatchMetadata(INT32_MAX - 1, INT32_MAX, 0, 0, 0)
    assert state.check([pb(0)]) is None
    assert increment_sequence(INT32_MAX - 1, 3) == 1


def test_batches_without_producer_id_are_not_tracked():
    state = ProducerStateManager()
    plain = ProducerBatch(-1, -1, -1, -1, 0, 0, 0)
    assert state.check([plain, plain]) is None
    state.update([plain])
    assert state.producers == {}


def test_snapshot_round_trip_and_corruption():
    state = ProducerStateManager()
    for pid in (1, 2, 3):
        for i in range(6):
            state.update([pb(i, pid=pid, epoch=pid, first_offset=100 * pid + i)])
    data = state.snapshot_bytes()
    loaded = ProducerStateManager()
    loaded.load_snapshot_bytes(data, 999)
    assert loaded.map_end_offset == 999
    for pid in (1, 2, 3):
        assert list(loaded.producers[pid].batches) == list(state.producers[pid].batches)
        assert loaded.producers[pid].producer_epoch == pid
    damaged = bytearray(data)
    damaged[20] ^= 1
    for bad in (bytes(damaged), data[:-1], data[:4], b""):
        with pytest.raises(SnapshotError):
            ProducerStateManager().load_snapshot_bytes(bad, 0)


def test_expired_producers_are_removed():
    state = ProducerStateManager()
    state.update([ProducerBatch(1, 0, 0, 0, 1000, 0, 0), ProducerBatch(2, 0, 0, 0, 5000, 1, 1)])
    assert state.remove_expired(now_ms=7000, expiration_ms=3000) == 1
    assert list(state.producers) == [2]


def header(rng, next_seq, *, offset=0):
    """A random batch header: plain, control, or idempotent (two producers, two epochs;
    mostly the sequence that follows ``next_seq[pid]``, else one near 0 or the wrap)."""
    kind = rng.random()
    count = rng.randint(1, 3)
    recs = [(b"k", b"v", 1000 + rng.randint(0, 50), []) for _ in range(count)]
    if kind < 0.2:
        return records.parse_batch_header(records.build_batch(recs, base_offset=offset))
    pid = rng.choice([7, 8])
    seq = next_seq.get(pid, 0) if rng.random() < 0.6 else rng.choice(
        [0, 1, 2, 3, 5, INT32_MAX - 1, INT32_MAX])
    raw = records.build_batch(recs, base_offset=offset, producer_id=pid,
                              producer_epoch=rng.choice([0, 0, 0, 0, 1]), base_sequence=seq,
                              is_control=kind > 0.95)
    next_seq[pid] = increment_sequence(seq, count)
    return records.parse_batch_header(raw)


def entries(state):
    return ({pid: (e.producer_epoch, list(e.batches), e.last_timestamp)
             for pid, e in state.producers.items()}, state.map_end_offset)


@pytest.mark.parametrize("seed", range(20))
def test_prepare_and_commit_append_agree_with_check_and_update(seed):
    # Appends as a leader sees them (offsets assigned by the log) and as a follower does
    # (offsets in the headers): the header fast path must decide and record exactly what
    # check/update do with ProducerBatch objects.
    rng = random.Random(seed)
    outcomes = set()
    for leader in (True, False):
        oracle, state = ProducerStateManager(), ProducerStateManager()
        next_offset, sent = 0, []
        for _ in range(60):
            headers, offset = [], next_offset
            next_seq = {pid: increment_sequence(e.last_seq, 1)
                        for pid, e in oracle.producers.items()}
            if leader and sent and rng.random() < 0.2:  # a producer's retry
                headers = rng.choice(sent[-3:])
                offset += sum(h.last_offset_delta + 1 for h in headers)
            for _ in range(0 if headers else rng.randint(1, 4)):
                h = header(rng, next_seq, offset=0 if leader else offset)
                headers.append(h)
                offset += h.last_offset_delta + 1
            batches, o = [], next_offset
            for h in headers:
                batches.append(ProducerBatch.from_header(h, o))
                o += h.last_offset_delta + 1
            try:
                expected = oracle.check(batches) if leader else None
            except KafkaError as exc:
                with pytest.raises(KafkaError) as err:
                    state.prepare_append(headers, check=True)
                assert err.value.code == exc.code
                outcomes.add(exc.code)
                continue
            pending = state.prepare_append(headers, check=leader)
            assert pending.duplicate == expected
            if expected is not None:
                outcomes.add("duplicate")
                continue
            oracle.update(batches)
            state.commit_append(pending, headers, offset, offsets_assigned=leader)
            assert entries(state) == entries(oracle)
            outcomes.add("appended")
            sent.append(headers)
            next_offset = offset
    assert {"appended", "duplicate"} <= outcomes and len(outcomes) >= 3


# -- through the Log --------------------------------------------------------------------


def idem(seq, count=1, epoch=0, value=b"v"):
    return batch(count, producer_id=PID, producer_epoch=epoch, base_sequence=seq, value=value)


def test_duplicate_append_returns_original_offsets_and_writes_nothing(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append(batch(2))  # a plain producer first
    first = log.append(idem(0, 3))
    second = log.append(idem(3, 2))
    size = log.size_bytes
    retry = log.append(idem(0, 3))
    assert retry.duplicate
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert log.append(idem(3, 2)).first_offset == second.first_offset
    assert (log.log_end_offset, log.size_bytes) == (7, size)


def test_rejected_appends_leave_the_log_untouched(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append(idem(0, 2, epoch=1))
    size = log.size_bytes
    for bad, code in ((idem(5, epoch=1), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
                      (idem(2, epoch=0), ErrorCode.INVALID_PRODUCER_EPOCH),
                      (idem(3, epoch=2), ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)):
        with pytest.raises(KafkaError) as err:
            log.append(bad)
        assert err.value.code == code
    assert (log.log_end_offset, log.size_bytes) == (2, size)
    assert log.append(idem(2, epoch=1)).first_offset == 2


def test_producer_id_minus_one_ignores_sequences(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    for _ in range(3):
        log.append(batch(1, base_sequence=7))
    assert log.log_end_offset == 3


def test_state_survives_a_clean_restart_via_snapshot(tmp_path):
    d = str(tmp_path / "t-0")
    log = Log(d, LogConfig())
    for i in range(5):
        log.append(idem(i * 2, 2))
    log.close()
    assert list_snapshots(d) == [10]
    log = Log(d, LogConfig(), clean_shutdown=True)
    for i in range(5):  # every one of the last five batches is still recognised
        assert log.append(idem(i * 2, 2)).duplicate
    assert log.append(idem(10)).first_offset == 10


def test_state_is_rebuilt_from_segments_after_a_crash(tmp_path):
    d = str(tmp_path / "t-0")
    one = len(idem(0))
    log = Log(d, LogConfig(segment_bytes=one * 3))
    for i in range(8):
        log.append(idem(i))
    log.flush()
    del log  # no close: no snapshot at the log end offset
    assert max(list_snapshots(d)) < 8
    log = Log(d, LogConfig(segment_bytes=one * 3))
    assert log.append(idem(7)).duplicate
    with pytest.raises(KafkaError):
        log.append(idem(9))
    assert log.append(idem(8)).first_offset == 8


def test_state_is_rebuilt_without_any_snapshot(tmp_path):
    d = str(tmp_path / "t-0")
    log = Log(d, LogConfig())
    for i in range(4):
        log.append(idem(i))
    log.close()
    for offset in list_snapshots(d):
        os.unlink(os.path.join(d, f"{offset:020d}.snapshot"))
    log = Log(d, LogConfig(), clean_shutdown=True)
    assert log.append(idem(3)).duplicate
    assert log.append(idem(4)).first_offset == 4
    assert [o for o, _ in read_records(log)] == list(range(5))


def test_truncation_rewinds_producer_state(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=len(idem(0)) * 2))
    for i in range(6):
        log.append(idem(i))
    log.truncate_to(3)
    # Sequences 3..5 were cut off, so the producer continues at 3 again.
    assert log.append(idem(3)).first_offset == 3


# -- the coordinator epoch of the last transaction marker -----------------------------------


def txn(seq, epoch=0):
    return bytearray(records.build_batch([(b"k", b"v", 1_700_000_000_000, [])], producer_id=PID,
                                         producer_epoch=epoch, base_sequence=seq, is_transactional=True))


def coordinator_epoch(log):
    return log.producer_state.producers[PID].coordinator_epoch


def test_complete_txn_keeps_the_coordinator_epoch_and_the_snapshot_stores_it():
    state = ProducerStateManager()
    state.update([pb(0, first_offset=0)])
    assert state.producers[PID].coordinator_epoch == -1  # no marker yet
    state.complete_txn(PID, 0, 1, 2000, 5)
    assert state.producers[PID].coordinator_epoch == 5
    state.complete_txn(PID, 0, 2, 2000)  # a marker whose epoch was not read changes nothing
    assert state.producers[PID].coordinator_epoch == 5
    state.complete_txn(PID, 0, 3, 2000, 9)
    loaded = ProducerStateManager()
    loaded.load_snapshot_bytes(state.snapshot_bytes(), 4)
    assert loaded.producers[PID].coordinator_epoch == 9
    assert list(loaded.producers[PID].batches) == list(state.producers[PID].batches)


def test_version_2_snapshots_still_load_without_a_coordinator_epoch():
    from pykfk._core import crc32c

    # Version 2: producer_id, epoch, last_timestamp, open transaction's first offset,
    # batch count, then the batches; no coordinator epoch.
    body = struct.pack(">i", 1) + struct.pack(">qhqqB", PID, 3, 1234, 10, 1) + struct.pack(">iiqqq", 0, 0, 10, 10, 1234)
    loaded = ProducerStateManager()
    loaded.load_snapshot_bytes(struct.pack(">hI", 2, crc32c(body)) + body, 11)
    entry = loaded.producers[PID]
    assert (entry.producer_epoch, entry.coordinator_epoch, loaded.ongoing) == (3, -1, {PID: 10})
    assert list(entry.batches) == [BatchMetadata(0, 0, 10, 10, 1234)]


def test_marker_coordinator_epoch_on_the_leader_a_follower_and_after_restarts(tmp_path):
    leader_dir = str(tmp_path / "t-0")
    leader = Log(leader_dir, LogConfig())
    leader.append(txn(0))
    assert coordinator_epoch(leader) == -1
    leader.append_marker(PID, 0, commit=True, coordinator_epoch=7)
    assert coordinator_epoch(leader) == 7

    # A follower gets the same batches with their offsets; the epoch is read from the marker.
    follower = Log(str(tmp_path / "follower" / "t-0"), LogConfig())
    follower.append(txn(0), assign_offsets=False)
    marker = bytearray(marker_batch(PID, 0, True, 7, 1_700_000_000_000))
    struct.pack_into(">q", marker, 0, 1)  # its offset (the base offset is outside the CRC)
    follower.append(marker, assign_offsets=False)
    assert coordinator_epoch(follower) == 7
    follower.close()

    leader.close()  # a snapshot at the log end offset
    leader = Log(leader_dir, LogConfig(), clean_shutdown=True)
    assert coordinator_epoch(leader) == 7
    leader.append(txn(1))
    leader.append_marker(PID, 0, commit=False, coordinator_epoch=8)
    leader.flush()
    del leader  # a crash: the marker at epoch 8 is after the last snapshot, found by replay
    leader = Log(leader_dir, LogConfig())
    assert coordinator_epoch(leader) == 8
    leader.close()
    for offset in list_snapshots(leader_dir):
        os.unlink(os.path.join(leader_dir, f"{offset:020d}.snapshot"))
    leader = Log(leader_dir, LogConfig(), clean_shutdown=True)  # rebuilt from the segments alone
    assert coordinator_epoch(leader) == 8
    leader.close()
