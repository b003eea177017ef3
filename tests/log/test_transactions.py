"""Transactions in a partition's log: the last stable offset, COMMIT/ABORT markers, the
aborted-transactions index (``.txnindex``) across reopen, recovery, truncation and
retention, and producer snapshots that keep open transactions."""

from __future__ import annotations

import os
import time

import pytest

from pykfk._core import records
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log import Log, LogConfig
from pykfk.log.transactions import AbortedTxn, control_markers, marker_type

PID_A, PID_B = 1000, 2000


def txn_batch(pid: int, seq: int, count: int = 2, epoch: int = 0) -> bytearray:
    # Timestamps of now: markers carry the append time, and segment.ms would roll between.
    now = int(time.time() * 1000)
    recs = [(b"k%d" % i, b"%d-%d" % (pid, seq + i), now, []) for i in range(count)]
    return bytearray(records.build_batch(recs, producer_id=pid, producer_epoch=epoch,
                                         base_sequence=seq, is_transactional=True))


def plain_batch() -> bytearray:
    return bytearray(records.build_batch([(b"k", b"plain", int(time.time() * 1000), [])]))


def open_log(path, **kw) -> Log:
    return Log(str(path / "t-0"), LogConfig(segment_bytes=kw.pop("segment_bytes", 1 << 20)), **kw)


def test_open_transaction_holds_the_last_stable_offset(tmp_path):
    log = open_log(tmp_path)
    log.append(plain_batch())                      # offset 0
    log.append(txn_batch(PID_A, 0))                # 1-2, open
    assert log.last_stable_offset == 1
    log.append(plain_batch())                      # 3
    log.append(txn_batch(PID_B, 0))                # 4-5, open
    assert log.last_stable_offset == 1
    info = log.append_marker(PID_A, 0, commit=True, coordinator_epoch=3)
    assert info.first_offset == 6
    assert log.last_stable_offset == 4             # B still open
    log.append_marker(PID_B, 0, commit=False, coordinator_epoch=3)
    assert log.last_stable_offset == log.high_watermark == 8
    assert log.aborted_transactions(0, 8) == [AbortedTxn(PID_B, 4, 7, 8)]
    assert log.aborted_transactions(8, 9) == []     # marker below the read
    assert log.aborted_transactions(0, 4) == []     # first batch at or past the end
    log.close()


def test_markers_are_control_batches_with_the_marker_type(tmp_path):
    log = open_log(tmp_path)
    log.append(txn_batch(PID_A, 0))
    log.append_marker(PID_A, 0, commit=False, coordinator_epoch=1)
    data = log.read(0, 1 << 20).file_region.read()
    headers = []
    position = 0
    while position < len(data):
        header = records.parse_batch_header(data, position)
        headers.append(header)
        position += header.size
    assert [h.is_control for h in headers] == [False, True]
    assert headers[1].is_transactional and headers[1].producer_id == PID_A
    assert [kind for _h, kind in control_markers(data, headers)] == [0]  # ABORT
    assert marker_type(data[headers[0].size:]) == 0
    log.close()


def test_marker_of_an_older_epoch_is_refused(tmp_path):
    log = open_log(tmp_path)
    log.append(txn_batch(PID_A, 0, epoch=2))
    with pytest.raises(KafkaError) as caught:
        log.append_marker(PID_A, 1, commit=True, coordinator_epoch=0)
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    # A marker of a newer epoch (the coordinator fencing the producer) moves it there:
    # the old epoch's writes are refused afterwards.
    log.append_marker(PID_A, 3, commit=False, coordinator_epoch=0)
    with pytest.raises(KafkaError) as caught:
        log.append(txn_batch(PID_A, 2, epoch=2))
    assert caught.value.code == ErrorCode.INVALID_PRODUCER_EPOCH
    log.close()


@pytest.mark.parametrize("clean", [True, False])
def test_aborted_and_open_transactions_survive_reopen(tmp_path, clean):
    log = open_log(tmp_path, segment_bytes=400)
    for i in range(3):
        log.append(txn_batch(PID_A, 0, epoch=i))
        log.append_marker(PID_A, i, commit=i != 1, coordinator_epoch=0)
    log.append(txn_batch(PID_B, 0))               # left open
    lso, aborted = log.last_stable_offset, log.aborted_transactions(0, 100)
    assert len(aborted) == 1 and len(log.segments) > 1
    assert any(name.endswith(".txnindex") for name in os.listdir(log.dir))
    if clean:
        log.close()
        again = open_log(tmp_path, clean_shutdown=True)
    else:
        log.flush()  # a kill -9: no close, no snapshot at the end
        again = open_log(tmp_path)
    assert again.aborted_transactions(0, 100) == aborted
    assert again.last_stable_offset == lso
    again.append_marker(PID_B, 0, commit=True, coordinator_epoch=0)
    assert again.last_stable_offset == again.log_end_offset
    again.close()


def test_lost_txnindex_is_rebuilt_from_the_log(tmp_path):
    log = open_log(tmp_path)
    log.append(txn_batch(PID_A, 0))
    log.append_marker(PID_A, 0, commit=False, coordinator_epoch=0)
    aborted = log.aborted_transactions(0, 100)
    log.flush()
    for name in os.listdir(log.dir):
        if name.endswith((".txnindex", ".snapshot")):
            os.unlink(os.path.join(log.dir, name))
    again = open_log(tmp_path)
    assert again.aborted_transactions(0, 100) == aborted
    again.close()


def test_truncation_drops_later_aborts_and_reopens_transactions(tmp_path):
    log = open_log(tmp_path)
    log.append(txn_batch(PID_A, 0))                # 0-1
    log.append_marker(PID_A, 0, commit=False, coordinator_epoch=0)  # 2
    log.append(txn_batch(PID_B, 0))                # 3-4
    log.append_marker(PID_B, 0, commit=False, coordinator_epoch=0)  # 5
    log.truncate_to(5)                             # B's marker is gone
    assert log.aborted_transactions(0, 100) == [AbortedTxn(PID_A, 0, 2, 3)]
    assert log.last_stable_offset == 3             # B's transaction is open again
    log.close()
    again = open_log(tmp_path, clean_shutdown=True)
    assert again.aborted_transactions(0, 100) == [AbortedTxn(PID_A, 0, 2, 3)]
    again.close()


def test_follower_appends_track_transactions(tmp_path):
    leader = open_log(tmp_path)
    leader.append(txn_batch(PID_A, 0))
    leader.append_marker(PID_A, 0, commit=False, coordinator_epoch=0)
    leader.append(txn_batch(PID_B, 0))
    data = leader.read(0, 1 << 20).file_region.read()
    follower = Log(str(tmp_path / "f" / "t-0"), LogConfig())
    follower.append(bytearray(data), assign_offsets=False)
    assert follower.aborted_transactions(0, 100) == leader.aborted_transactions(0, 100)
    assert follower.producer_state.ongoing == {PID_B: 3}
    leader.close()
    follower.close()


def _keyed_txn_batch(pid: int, seq: int, key: bytes, value: bytes, epoch: int = 0) -> bytearray:
    return bytearray(records.build_batch([(key, value, int(time.time() * 1000), [])], producer_id=pid,
                                         producer_epoch=epoch, base_sequence=seq, is_transactional=True))


def test_compaction_removes_aborted_records_and_never_lets_them_hide_committed_ones(tmp_path):
    from pykfk.log.cleaner import LogCleaner

    log = Log(str(tmp_path / "c-0"), LogConfig(segment_bytes=300, cleanup_policy="compact"))
    log.append(_keyed_txn_batch(PID_A, 0, b"k", b"committed"))
    log.append_marker(PID_A, 0, commit=True, coordinator_epoch=0)
    log.append(_keyed_txn_batch(PID_B, 0, b"k", b"aborted"))        # later, but aborted
    log.append_marker(PID_B, 0, commit=False, coordinator_epoch=0)
    log.append(_keyed_txn_batch(PID_A, 1, b"other", b"open"))       # left open: not cleaned
    for i in range(6):  # roll past the transactions so their segments are cleanable
        log.append(bytearray(records.build_batch([(b"filler-%d" % i, b"x" * 50, int(time.time() * 1000), [])])))
    stats = LogCleaner().clean_log(log, force=True)
    assert stats is not None and stats.end_offset <= log.last_stable_offset
    values: dict[bytes, list[bytes]] = {}
    data = b"".join(os.pread(seg.fileno(), seg.size, 0) for seg in log.segments)
    for record in records.iter_records(data):
        if not record.is_control:
            values.setdefault(record.key, []).append(record.value)
    assert values[b"k"] == [b"committed"]
    assert values[b"other"] == [b"open"]
    log.close()
