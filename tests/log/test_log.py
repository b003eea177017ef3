"""Log: append, read, roll, flush policy, truncation, timestamps."""

from __future__ import annotations

import threading

import pytest

from pykfk._core import records
from pykfk._core.errors import CorruptBatchError, RecordTooLargeError
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log import Log, LogConfig
from pykfk.log.log import time_ms

from .helpers import batch, read_records, region_bytes

T0 = 1_700_000_000_000


def open_log(tmp_path, name="t-0", **config):
    return Log(str(tmp_path / name), LogConfig(**config))


def test_append_assigns_consecutive_offsets_and_reads_back_across_rolls(tmp_path):
    log = open_log(tmp_path, segment_bytes=1000)
    expected = []
    for i in range(40):
        n = i % 3 + 1
        info = log.append(batch(n, value=b"m%d" % i))
        assert (info.first_offset, info.last_offset) == (len(expected), len(expected) + n - 1)
        assert info.record_count == n
        assert info.headers[0].base_offset == info.first_offset
        expected += [(len(expected) + j, b"m%d-%d" % (i, j)) for j in range(n)]
    assert log.log_end_offset == len(expected)
    assert len(log.segments) > 3
    # Segment files are named after the first offset they hold and never exceed the size.
    for seg, nxt in zip(log.segments, log.segments[1:]):
        assert seg.next_offset == nxt.base_offset
        assert seg.size <= 1000
    assert read_records(log) == expected
    # Reading from the middle of any segment starts with the batch holding that offset.
    for offset in (0, 7, 33, len(expected) - 1):
        assert read_records(log, offset)[0] == expected[offset]


def test_file_names_follow_kafka(tmp_path):
    log = open_log(tmp_path, segment_bytes=200)
    for _ in range(5):
        log.append(batch(2))
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.suffix == ".log")
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]


def test_read_returns_whole_batches_and_at_least_one(tmp_path):
    log = open_log(tmp_path)
    sizes = []
    for _ in range(4):
        sizes.append(log.append(batch(3, value=b"x" * 50)).headers[0].size)
    one = log.read(0, 1)
    assert one.file_region.size == sizes[0]  # one whole batch although max_bytes is 1
    two = log.read(0, sizes[0] + sizes[1] + 10)
    assert two.file_region.size == sizes[0] + sizes[1]
    partial = log.read(0, 10, min_one_message=False)
    assert partial.file_region.size == 10  # Fetch v0-2: clients drop the partial batch
    assert (one.log_start_offset, one.log_end_offset, one.high_watermark) == (0, 12, 12)


def test_read_outside_the_log_is_offset_out_of_range(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(5))
    with pytest.raises(KafkaError) as err:
        log.read(6, 1000)
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
    with pytest.raises(KafkaError):
        log.read(-1, 1000)
    at_end = log.read(5, 1000)
    assert at_end.file_region is None and at_end.log_end_offset == 5


def test_read_stops_below_max_offset(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    for _ in range(30):
        log.append(batch(1))
    assert len(log.segments) > 2
    for limit in (1, 4, 10, 29):
        got = []
        offset = 0
        while True:
            data = log.read(offset, 1 << 20, max_offset=limit)
            if data.file_region is None:
                break
            got += [r.offset for r in records.iter_records(region_bytes(data))]
            offset = got[-1] + 1
        assert got == list(range(limit))


def test_high_watermark_follows_log_end_until_set(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(4))
    assert log.high_watermark == 4
    log.high_watermark = 2
    log.append(batch(4))
    assert log.high_watermark == 2
    log.high_watermark = 100
    assert log.high_watermark == 8  # clamped to the log end offset
    log.high_watermark = None
    assert log.high_watermark == 8


def test_roll_by_size(tmp_path):
    one = len(batch(1))
    log = open_log(tmp_path, segment_bytes=3 * one)
    for _ in range(10):
        log.append(batch(1))
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(s.size == 3 * one for s in log.segments[:-1])


def test_roll_by_time_from_first_batch_timestamp(tmp_path):
    log = open_log(tmp_path, segment_ms=1000)
    log.append(batch(1, timestamp=T0))
    log.append(batch(1, timestamp=T0 + 1000))  # exactly segment.ms: no roll yet
    log.append(batch(1, timestamp=T0 + 1001))
    log.append(batch(1, timestamp=T0 + 1500))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_by_time_from_segment_age_without_timestamps(tmp_path):
    log = open_log(tmp_path, segment_ms=60_000)
    now = time_ms()
    log.append(batch(1, timestamp=-1), now_ms=now)
    log.append(batch(1, timestamp=-1), now_ms=now + 30_000)
    assert len(log.segments) == 1
    log.append(batch(1, timestamp=-1), now_ms=now + 61_000)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_the_index_is_full(tmp_path):
    # index.interval.bytes 0: every batch after the first gets an index entry; 24 bytes
    # hold 3 offset-index entries and 2 time-index entries.
    log = open_log(tmp_path, index_interval_bytes=0, max_index_bytes=24)
    for i in range(20):
        log.append(batch(1, timestamp=T0 + i))
    assert len(log.segments) > 3
    assert all(s.index_entries <= 3 and s.timeindex_entries <= 2 for s in log.segments)
    assert [v for _, v in read_records(log)] == [b"v-0"] * 20


def test_roll_is_a_noop_on_an_empty_active_segment(tmp_path):
    log = open_log(tmp_path)
    assert log.roll() is log.active_segment
    log.append(batch(2))
    seg = log.roll()
    assert seg.base_offset == 2 and len(log.segments) == 2
    assert log.roll() is seg


def test_bad_batches_are_refused_and_leave_the_log_untouched(tmp_path):
    log = open_log(tmp_path, max_message_bytes=500, segment_bytes=1000)
    log.append(batch(2))
    size = log.size_bytes
    corrupt = batch(2)
    corrupt[-1] ^= 0xFF
    with pytest.raises(CorruptBatchError):
        log.append(corrupt)
    with pytest.raises(RecordTooLargeError):
        log.append(batch(1, value=b"x" * 600))
    with pytest.raises(CorruptBatchError):
        log.append(batch(2)[:-3])  # truncated
    many = b"".join(batch(3, value=b"y" * 100) for _ in range(4))  # each fits, all do not
    with pytest.raises(KafkaError) as err:
        log.append(bytearray(many))
    assert err.value.code == ErrorCode.RECORD_LIST_TOO_LARGE
    assert (log.log_end_offset, log.size_bytes) == (2, size)
    assert log.append(bytearray()).first_offset == -1


def test_read_only_input_is_copied_not_refused(tmp_path):
    log = open_log(tmp_path)
    payload = bytes(batch(3))
    info = log.append(payload)
    assert info.last_offset == 2
    assert records.parse_batch_header(payload).base_offset == 0  # caller's bytes untouched


def test_leader_epoch_and_log_append_time_are_written_into_the_batch(tmp_path):
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    log.append(batch(2), now_ms=T0)
    info = log.append(batch(3, timestamp=5), leader_epoch=7, now_ms=T0 + 42)
    assert info.log_append_time_ms == T0 + 42
    raw = region_bytes(log.read(2, 1 << 20))
    (header,) = records.validate_batches(raw)  # CRC recomputed, still valid
    assert header.timestamp_type == 1
    assert header.max_timestamp == T0 + 42
    assert header.partition_leader_epoch == 7
    assert header.base_offset == 2
    assert log.offset_for_timestamp(T0 + 42) == 2


def test_create_time_append_reports_no_append_time(tmp_path):
    log = open_log(tmp_path)
    assert log.append(batch(1)).log_append_time_ms == -1


def test_follower_append_keeps_the_leaders_offsets(tmp_path):
    log = open_log(tmp_path)
    b = batch(3)
    records.assign_offsets(b, 10)
    info = log.append(b, assign_offsets=False)
    assert (info.first_offset, info.last_offset, log.log_end_offset) == (10, 12, 13)
    stale = batch(1)
    records.assign_offsets(stale, 12)
    with pytest.raises(KafkaError):
        log.append(stale, assign_offsets=False)
    assert [o for o, _ in read_records(log, 10)] == [10, 11, 12]


def test_append_info_headers_are_the_stored_headers(tmp_path):
    # A leader's AppendInfo works its headers out from the received ones on demand: they
    # must equal what is on disk, offsets and leader epoch included.
    for config in ({}, {"message_timestamp_type": "LogAppendTime"}):
        log = open_log(tmp_path, f"t{len(config)}-0", **config)
        log.append(batch(2))
        payload = batch(2) + batch(3, value=b"w") + batch(1)
        info = log.append(payload, leader_epoch=9, now_ms=T0)
        stored = records.validate_batches(region_bytes(log.read(2, 1 << 20)))
        assert info.headers == stored
        assert [h.base_offset for h in info.headers] == [2, 4, 7]
        assert {h.partition_leader_epoch for h in info.headers} == {9}
        assert info.record_count == 6 and (info.first_offset, info.last_offset) == (2, 7)


def test_follower_batches_out_of_order_are_refused_and_change_nothing(tmp_path):
    one, two = len(batch(1)), len(batch(2))
    for segment_bytes in (1 << 20, 2 * one + two - 1):  # without and with a roll due
        log = open_log(tmp_path, f"t{segment_bytes}-0", segment_bytes=segment_bytes)
        first = batch(1)
        records.assign_offsets(first, 0)
        log.append(first, assign_offsets=False)
        # 5, 6 then 6 again: the second batch overlaps the first one.
        a, b = batch(2), batch(1)
        records.assign_offsets(a, 5)
        records.assign_offsets(b, 6)
        before = (log.log_end_offset, log.size_bytes, len(log.segments))
        with pytest.raises(KafkaError) as err:
            log.append(a + b, assign_offsets=False)
        assert err.value.code == ErrorCode.UNKNOWN_SERVER_ERROR
        assert (log.log_end_offset, log.size_bytes, len(log.segments)) == before
        records.assign_offsets(b, 7)
        assert log.append(a + b, assign_offsets=False).last_offset == 7
        assert [o for o, _ in read_records(log)] == [0, 5, 6, 7]


def test_legacy_message_sets_are_converted(tmp_path):
    log = open_log(tmp_path)
    legacy = records.to_legacy(bytes(batch(2)), 1)
    assert records.is_legacy(legacy)
    info = log.append(bytearray(legacy))
    assert (info.first_offset, info.last_offset) == (0, 1)
    assert [v for _, v in read_records(log)] == [b"v-0", b"v-1"]


def test_flush_messages_moves_the_recovery_point(tmp_path):
    log = open_log(tmp_path, flush_interval_messages=3)
    log.append(batch(1))
    log.append(batch(1))
    assert (log.recovery_point, log.unflushed_messages) == (0, 2)
    log.append(batch(1))
    assert (log.recovery_point, log.unflushed_messages) == (3, 0)


def test_flush_ms_makes_a_flush_due(tmp_path):
    log = open_log(tmp_path, flush_interval_ms=1000)
    now = log.last_flush_ms
    assert not log.flush_due(now + 5000)  # nothing unflushed
    log.append(batch(2))
    assert not log.flush_due(now + 999)
    assert log.flush_due(now + 1000)
    log.flush()
    assert log.recovery_point == 2 and not log.flush_due(log.last_flush_ms + 5000)


class ThreadScheduler:
    """Runs scheduled work on a fresh thread, as the LogManager's executor does."""

    def __init__(self):
        self.threads = []
        self.names = []

    def schedule(self, delay_ms, fn):
        def run():
            self.names.append(threading.current_thread().name)
            fn()
        t = threading.Thread(target=run, name="flusher")
        self.threads.append(t)
        t.start()

    def join(self):
        for t in self.threads:
            t.join(5)


def test_flush_messages_with_a_scheduler_flushes_off_the_appending_thread(tmp_path):
    scheduler = ThreadScheduler()
    log = Log(str(tmp_path / "t-0"), LogConfig(flush_interval_messages=2), scheduler=scheduler)
    log.append(batch(1))
    assert len(scheduler.threads) == 1    # the new segment's index files, made off the loop
    log.append(batch(1))
    scheduler.join()
    assert scheduler.names == ["flusher", "flusher"]
    assert log.recovery_point == 2


def test_roll_flushes_the_finished_segment_in_the_background(tmp_path):
    scheduler = ThreadScheduler()
    log = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=len(batch(1)) * 2),
              scheduler=scheduler)
    for _ in range(3):
        log.append(batch(1))
    scheduler.join()
    assert log.recovery_point == 2  # the base offset of the new segment


def test_truncate_to_removes_the_tail_and_appends_continue(tmp_path):
    log = open_log(tmp_path, segment_bytes=400, file_delete_delay_ms=0)
    for i in range(30):
        log.append(batch(1, value=b"%d" % i))
    assert log.truncate_to(12) >= 1
    assert log.log_end_offset == 12
    assert [o for o, _ in read_records(log)] == list(range(12))
    assert log.append(batch(1, value=b"new")).first_offset == 12
    assert read_records(log)[-1] == (12, b"new-0")
    assert log.truncate_to(100) == 0
    log.sweep_deleted_segments(force=True)
    assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted")]


def test_truncate_fully_restarts_the_log(tmp_path):
    log = open_log(tmp_path, segment_bytes=400)
    for _ in range(10):
        log.append(batch(1))
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert log.append(batch(1)).first_offset == 50
    assert read_records(log) == [(50, b"v-0")]


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path, segment_bytes=300)
    for i in range(20):
        log.append(batch(1, timestamp=T0 + 10 * i))
    assert log.offset_for_timestamp(T0) == 0
    assert log.offset_for_timestamp(T0 + 55) == 6
    assert log.offset_for_timestamp(T0 + 190) == 19
    assert log.offset_for_timestamp(T0 + 191) is None
    assert log.offset_for_timestamp(-1) == 20  # latest
    assert log.offset_for_timestamp(-2) == 0  # earliest


def test_closed_log_refuses_appends(tmp_path):
    log = open_log(tmp_path)
    log.append(batch(1))
    log.close()
    with pytest.raises(KafkaError) as err:
        log.append(batch(1))
    assert err.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 1


def test_directory_name_must_be_topic_dash_partition(tmp_path):
    with pytest.raises(ValueError):
        Log(str(tmp_path / "nopartition"), LogConfig())
    log = Log(str(tmp_path / "my-dashed-topic-12"), LogConfig())
    assert (log.topic, log.partition) == ("my-dashed-topic", 12)


def test_appends_and_reads_while_a_worker_flushes_and_deletes(tmp_path):
    """The loop thread appends and reads while a worker thread flushes and applies
    retention, as under the LogManager; nothing fails and every read is consistent."""
    one = len(batch(1))
    # Deleted segments stay open for file.delete.delay.ms: the regions read here stay valid.
    log = open_log(tmp_path, segment_bytes=4 * one, retention_bytes=8 * one, retention_ms=-1,
                   file_delete_delay_ms=60_000)
    stop = threading.Event()
    errors = []

    def worker():
        try:
            while not stop.is_set():
                log.flush()
                log.delete_retained_segments()
        except Exception as exc:  # reported below  # noqa: BLE001 - any failure of the thread is the finding
            errors.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    try:
        for i in range(200):
            log.append(batch(1, value=b"%d" % i))
            start = log.log_start_offset
            try:
                data = log.read(start, 1 << 20)
            except KafkaError as exc:  # retention moved the start between the two lines
                assert exc.code == ErrorCode.OFFSET_OUT_OF_RANGE
                continue
            first = next(records.iter_records(region_bytes(data)))
            assert first.offset <= start and first.value == b"%d-0" % first.offset
    finally:
        stop.set()
        t.join(10)
    assert not errors
    log.flush()
    log.delete_retained_segments()
    assert log.recovery_point == 200
    assert [o for o, _ in read_records(log)] == list(range(log.log_start_offset, 200))
    assert log.log_start_offset >= 200 - 12
    assert log.sweep_deleted_segments(force=True) > 40
