"""The share-partition state machine (KIP-932): acquisition, acknowledgement, locks,
delivery counts and the SPSO/SPEO window, without I/O."""

from pykfk.errors import ErrorCode
from pykfk.group.share.partition import (
    AckBatch,
    Acquired,
    RecordState,
    SharePartition,
    SharePartitionSettings,
    initial_start_offset,
)

ACCEPT, RELEASE, REJECT, GAP = 1, 2, 3, 0


def _part(**settings: int) -> SharePartition:
    return SharePartition(0, SharePartitionSettings(**{"lock_duration_ms": 1000, **settings}))


def test_members_acquire_disjoint_records_and_accepted_ones_move_the_start():
    part = _part()
    assert part.acquire("a", available_end=10, max_records=4, now_ms=0) == [Acquired(0, 3, 1)]
    assert part.acquire("b", available_end=10, max_records=4, now_ms=0) == [Acquired(4, 7, 1)]
    assert part.acquire("c", available_end=10, max_records=4, now_ms=0) == [Acquired(8, 9, 1)]
    assert part.acquire("c", available_end=10, max_records=4, now_ms=0) == []
    assert (part.start_offset, part.end_offset) == (0, 10)
    assert part.acknowledge("b", [AckBatch(4, 7, [ACCEPT])]) == ErrorCode.NONE
    assert part.start_offset == 0  # 0-3 still acquired by a
    assert part.acknowledge("a", [AckBatch(0, 3, [ACCEPT])]) == ErrorCode.NONE
    assert part.start_offset == 8
    assert part.counters.acknowledged == 8


def test_a_partly_acknowledged_batch_splits_and_released_records_are_redelivered():
    part = _part()
    part.acquire("a", 10, 10, now_ms=0)
    # per-offset types: 0 accepted, 1 released, 2 rejected, 3 a gap, 4-9 accepted
    assert part.acknowledge("a", [AckBatch(0, 3, [ACCEPT, RELEASE, REJECT, GAP]),
                                  AckBatch(4, 9, [ACCEPT])]) == ErrorCode.NONE
    assert part.start_offset == 1
    assert [(r.first, r.last, r.state) for r in part.ranges] == [
        (1, 1, RecordState.AVAILABLE), (2, 3, RecordState.ARCHIVED), (4, 9, RecordState.ACKNOWLEDGED)]
    assert part.acquire("b", 20, 5, now_ms=0) == [Acquired(1, 1, 2), Acquired(10, 13, 1)]
    assert part.counters.redelivered == 1


def test_acknowledging_what_the_member_does_not_hold_changes_nothing():
    part = _part()
    part.acquire("a", 5, 5, now_ms=0)
    before = [(r.first, r.last, r.state, r.member_id) for r in part.ranges]
    assert part.acknowledge("b", [AckBatch(0, 1, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    assert part.acknowledge("a", [AckBatch(3, 7, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE
    assert part.acknowledge("a", [AckBatch(0, 1, [ACCEPT]), AckBatch(9, 9, [ACCEPT])]) == \
        ErrorCode.INVALID_RECORD_STATE  # all or nothing: 0-1 stay acquired
    assert part.acknowledge("a", [AckBatch(3, 2, [ACCEPT])]) == ErrorCode.INVALID_REQUEST
    assert part.acknowledge("a", [AckBatch(0, 2, [ACCEPT, ACCEPT])]) == ErrorCode.INVALID_REQUEST
    assert part.acknowledge("a", [AckBatch(0, 0, [7])]) == ErrorCode.INVALID_REQUEST
    assert part.acknowledge("a", [AckBatch(0, 2, [ACCEPT]), AckBatch(2, 3, [ACCEPT])]) == ErrorCode.INVALID_REQUEST
    assert [(r.first, r.last, r.state, r.member_id) for r in part.ranges] == before
    assert part.acknowledge("a", [AckBatch(0, 4, [ACCEPT])]) == ErrorCode.NONE
    assert part.acknowledge("a", [AckBatch(0, 0, [ACCEPT])]) == ErrorCode.INVALID_RECORD_STATE  # done already


def test_expired_locks_release_records_and_the_delivery_limit_archives_them():
    part = _part(delivery_count_limit=3)
    for delivery in range(1, 4):
        assert part.acquire("a", 2, 10, now_ms=delivery * 10_000) == [Acquired(0, 1, delivery)]
        assert part.acquire("b", 2, 10, now_ms=delivery * 10_000) == []  # locked to a
        if delivery < 3:
            assert part.expire_locks(delivery * 10_000 + 1000) == 2
    # the third delivery times out at the limit: archived, never handed out again
    assert part.expire_locks(40_000) == 2
    assert part.ranges == [] and part.start_offset == 2
    assert part.acquire("b", 2, 10, now_ms=50_000) == []
    assert part.counters.archived == 2


def test_a_release_at_the_delivery_limit_archives_and_a_member_leaving_releases():
    part = _part(delivery_count_limit=2)
    part.acquire("a", 3, 10, now_ms=0)
    part.acknowledge("a", [AckBatch(0, 2, [RELEASE])])
    assert part.acquire("a", 3, 10, now_ms=0) == [Acquired(0, 2, 2)]
    assert part.release_member("a") == 3
    assert part.start_offset == 3 and part.counters.archived == 3


def test_the_in_flight_limit_and_max_records_bound_acquisition():
    part = _part(max_in_flight=5)
    assert part.acquire("a", 100, 3, now_ms=0) == [Acquired(0, 2, 1)]
    assert part.acquire("b", 100, 10, now_ms=0) == [Acquired(3, 4, 1)]
    assert part.acquire("c", 100, 10, now_ms=0) == []
    part.acknowledge("a", [AckBatch(0, 2, [ACCEPT])])
    assert part.acquire("c", 100, 10, now_ms=0) == [Acquired(5, 7, 1)]


def test_aborted_transactions_are_archived_not_handed_out():
    part = _part()
    assert part.acquire("a", 10, 10, now_ms=0, aborted=[(2, 4), (8, 20)]) == [Acquired(0, 1, 1), Acquired(5, 7, 1)]
    part.acknowledge("a", [AckBatch(0, 1, [ACCEPT]), AckBatch(5, 7, [ACCEPT])])
    assert part.start_offset == 10 and part.ranges == []


def test_state_batches_round_trip_with_acquired_records_available_again():
    part = _part()
    part.acquire("a", 6, 6, now_ms=0)
    part.acknowledge("a", [AckBatch(2, 3, [ACCEPT]), AckBatch(4, 4, [REJECT])])
    batches = part.state_batches()
    restored = SharePartition.restored(part.start_offset, 1, batches, part.settings)
    assert [(r.first, r.last, r.state, r.delivery_count) for r in restored.ranges] == [
        (0, 1, RecordState.AVAILABLE, 1), (2, 3, RecordState.ACKNOWLEDGED, 1),
        (4, 4, RecordState.ARCHIVED, 1), (5, 5, RecordState.AVAILABLE, 1)]
    assert restored.acquire("b", 10, 10, now_ms=0) == [Acquired(0, 1, 2), Acquired(5, 5, 2), Acquired(6, 9, 1)]


def test_reset_start_and_auto_offset_reset():
    part = _part()
    part.acquire("a", 10, 10, now_ms=0)
    part.reset_start(4)
    assert part.start_offset == 4 and part.ranges[0].first == 4
    assert initial_start_offset("latest", 3, 9) == 9
    assert initial_start_offset("earliest", 3, 9) == 3


def test_state_partition_spreads_share_partitions():
    """The layouts of the state records are checked against golden bytes in
    tests/protocol/test_internal_records.py; here where a share partition's state goes."""
    import uuid

    from pykfk.group.share.state_records import state_partition

    topic = uuid.uuid4()
    numbers = {state_partition("g", topic, p, 50) for p in range(200)}
    assert all(0 <= n < 50 for n in numbers) and len(numbers) > 10
