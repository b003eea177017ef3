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


# -- the last stable offset waits for the high watermark to pass the marker -----------------
#
# A leader appends the marker and only then do its followers fetch it; a leader that dies in
# between hands over a log in which the transaction is still open. So an ended transaction
# keeps holding the last stable offset at its first offset until the high watermark passes
# its marker (Kafka's ProducerStateManager.unreplicatedTxns), and the LSO never goes back.


def pinned_log(path, **kw) -> Log:
    """A leader's log whose high watermark only moves when set (followers in the ISR)."""
    log = open_log(path, **kw)
    log.high_watermark = log.log_end_offset
    return log


@pytest.mark.parametrize("commit", [True, False])
def test_marker_below_the_high_watermark_holds_the_last_stable_offset(tmp_path, commit):
    log = pinned_log(tmp_path)
    log.append(plain_batch())                      # 0
    log.append(txn_batch(PID_A, 0))                # 1-2
    log.high_watermark = 3
    assert log.last_stable_offset == 1
    info = log.append_marker(PID_A, 0, commit=commit, coordinator_epoch=0)  # 3
    assert info.first_offset == 3
    assert log.producer_state.ongoing == {}
    assert log.last_stable_offset == 1             # the marker is not replicated yet
    log.high_watermark = 3                         # (set again: still at the marker)
    assert log.last_stable_offset == 1
    log.high_watermark = 4                         # past the marker
    assert log.last_stable_offset == 4
    assert not log.producer_state.unreplicated
    if not commit:                                 # the index's LSO is Kafka's: past the marker
        assert log.aborted_transactions(0, 4) == [AbortedTxn(PID_A, 1, 3, 4)]
    log.close()


def test_interleaved_transactions_become_stable_in_marker_order(tmp_path):
    log = pinned_log(tmp_path)
    log.append(txn_batch(PID_A, 0))                # 0-1
    log.append(txn_batch(PID_B, 0))                # 2-3
    log.append_marker(PID_B, 0, commit=False, coordinator_epoch=0)  # 4
    log.append_marker(PID_A, 0, commit=True, coordinator_epoch=0)   # 5
    log.append(txn_batch(PID_B, 2, epoch=0))       # 6-7, B's next transaction
    assert log.log_end_offset == 8
    lsos = []
    for hw in range(9):
        log.high_watermark = hw
        lsos.append(log.last_stable_offset)
    # A (first offset 0) holds until its marker (5) is below the high watermark; then B's
    # second transaction (6) bounds it.
    assert lsos == [0, 0, 0, 0, 0, 0, 6, 6, 6]
    log.append_marker(PID_B, 0, commit=True, coordinator_epoch=0)   # 8
    assert log.last_stable_offset == 6
    log.high_watermark = 9
    assert log.last_stable_offset == 9
    # B's abort was indexed with the last stable offset of its moment (A still open).
    assert log.aborted_transactions(0, 9) == [AbortedTxn(PID_B, 2, 4, 0)]
    log.close()


def test_one_producer_ends_several_transactions_before_the_high_watermark_moves(tmp_path):
    log = pinned_log(tmp_path)
    for i in range(3):                             # 0-1 marker 2, 3-4 marker 5, 6-7 marker 8
        log.append(txn_batch(PID_A, 2 * i))
        log.append_marker(PID_A, 0, commit=i != 1, coordinator_epoch=0)
    assert log.last_stable_offset == 0
    expected = {0: 0, 2: 0, 3: 3, 5: 3, 6: 6, 8: 6, 9: 9}
    for hw, lso in expected.items():
        log.high_watermark = hw
        assert log.last_stable_offset == lso, hw
    log.close()


def test_the_cleaner_stops_at_a_transaction_whose_marker_is_not_replicated(tmp_path):
    from pykfk.log.cleaner import LogCleaner

    log = Log(str(tmp_path / "c-0"), LogConfig(segment_bytes=300, cleanup_policy="compact"))
    log.high_watermark = 0
    log.append(_keyed_txn_batch(PID_A, 0, b"k", b"v"))                # 0
    for i in range(6):
        log.append(bytearray(records.build_batch([(b"f-%d" % i, b"x" * 50, int(time.time() * 1000), [])])))
    log.append_marker(PID_A, 0, commit=True, coordinator_epoch=0)
    log.high_watermark = log.log_end_offset - 1     # below the marker
    assert log.last_stable_offset == 0
    assert LogCleaner().cleanable(log, None, int(time.time() * 1000)) is None
    log.high_watermark = log.log_end_offset
    found = LogCleaner().cleanable(log, None, int(time.time() * 1000))
    assert found is not None and found.first_uncleanable > 0
    log.close()


def test_a_standalone_log_moves_the_last_stable_offset_with_the_marker(tmp_path):
    """Without followers the high watermark is the log end: the marker is below it at once,
    and unpinning a high watermark settles the transactions it was holding."""
    log = pinned_log(tmp_path)
    log.append(txn_batch(PID_A, 0))
    log.high_watermark = 2
    log.append_marker(PID_A, 0, commit=True, coordinator_epoch=0)
    assert log.last_stable_offset == 0
    log.high_watermark = None                      # the last follower left the ISR
    assert log.last_stable_offset == 3 and not log.producer_state.unreplicated
    log.append(txn_batch(PID_B, 0))
    log.append_marker(PID_B, 0, commit=True, coordinator_epoch=0)
    assert log.last_stable_offset == log.log_end_offset == 6
    assert not log.producer_state.unreplicated
    log.close()


def replicate(leader: Log, follower: Log) -> None:
    """One follower fetch: the leader's new batches, then the leader's high watermark moves
    to the follower's log end and the follower takes the leader's (one fetch late)."""
    if follower.log_end_offset < leader.log_end_offset:
        data = leader.read(follower.log_end_offset, 1 << 20).file_region.read()
        follower.append(bytearray(data), assign_offsets=False)
    follower.high_watermark = leader.high_watermark
    leader.high_watermark = follower.log_end_offset


@pytest.mark.parametrize("kill_after", range(7))
def test_the_last_stable_offset_never_goes_back_when_the_leader_dies(tmp_path, kill_after):
    """A leader and one follower in the ISR; the leader dies after ``kill_after`` steps. The
    follower takes over; once its high watermark reaches its log end (before that a new
    leader answers no LSO), its LSO is at least every LSO the old leader reported."""
    leader = pinned_log(tmp_path / "leader")
    follower = pinned_log(tmp_path / "follower")
    steps = [
        lambda: leader.append(txn_batch(PID_A, 0)),                                 # 0-1
        lambda: replicate(leader, follower),
        lambda: leader.append_marker(PID_A, 0, commit=True, coordinator_epoch=0),  # 2
        lambda: leader.append(txn_batch(PID_B, 0)),                                 # 3-4
        lambda: replicate(leader, follower),
        lambda: leader.append_marker(PID_B, 0, commit=False, coordinator_epoch=0),  # 5
        lambda: replicate(leader, follower),
    ]
    reported = [leader.last_stable_offset]
    for step in steps[:kill_after + 1]:
        step()
        reported.append(leader.last_stable_offset)
    assert reported == sorted(reported)            # (and it never went back on the leader)
    follower.high_watermark = follower.log_end_offset  # the new leader, alone in the ISR
    assert follower.last_stable_offset >= max(reported), (reported, follower.last_stable_offset)
    leader.close()
    follower.close()


@pytest.mark.parametrize("hw_at_restart, lso", [(2, 0), (3, 3), (5, 3), (6, 6)])
def test_recovery_finds_ended_transactions_above_the_high_watermark_unstable(tmp_path, hw_at_restart, lso):
    """A kill -9: the producer state is replayed from the log; transactions whose marker is
    at or above the checkpointed high watermark stay unstable until it passes them."""
    log = pinned_log(tmp_path)
    log.append(txn_batch(PID_A, 0))                # 0-1, marker 2
    log.append_marker(PID_A, 0, commit=True, coordinator_epoch=0)
    log.append(txn_batch(PID_B, 0))                # 3-4, marker 5
    log.append_marker(PID_B, 0, commit=False, coordinator_epoch=0)
    log.flush()                                    # no close: no snapshot at the log end
    again = open_log(tmp_path)
    assert [first for _marker, first in again.producer_state.unreplicated] == [0, 3]
    assert again.last_stable_offset == again.log_end_offset == 6   # following the log end
    again.high_watermark = hw_at_restart           # the replica manager's checkpoint
    assert again.last_stable_offset == lso
    again.high_watermark = 6
    assert again.last_stable_offset == 6 and not again.producer_state.unreplicated
    again.close()


def test_truncation_keeps_replayed_transactions_above_the_high_watermark_unstable(tmp_path):
    log = pinned_log(tmp_path)
    log.append(txn_batch(PID_A, 0))                # 0-1
    log.append_marker(PID_A, 0, commit=True, coordinator_epoch=0)   # 2
    log.append(txn_batch(PID_B, 0))                # 3-4
    log.append_marker(PID_B, 0, commit=True, coordinator_epoch=0)   # 5
    log.high_watermark = 2
    log.truncate_to(5)                             # B's marker goes, A's is rebuilt from the log
    assert log.producer_state.ongoing == {PID_B: 3}
    assert log.last_stable_offset == 0             # A's marker (2) is not below the HW yet
    log.high_watermark = 3
    assert log.last_stable_offset == 3
    log.close()
