"""Log compaction over real files: what a consumer reads after the cleaner ran."""

from __future__ import annotations

import os
import time

import pytest

from pykfk._core import records
from pykfk.errors import ErrorCode
from pykfk.log.checkpoints import read_offset_checkpoint
from pykfk.log.cleaner import CLEANER_CHECKPOINT, DELETE_HORIZON_FLAG, LogCleaner
from pykfk.log.config import LogConfig
from pykfk.log.log import Log
from pykfk.log.transactions import ABORT, marker_type
from pykfk.log.validation import InvalidRecords
from tests.log.helpers import region_bytes

NOW = 1_700_000_000_000
DAY_MS = 86_400_000


def compacted(**kw) -> LogConfig:
    return LogConfig(cleanup_policy="compact", segment_bytes=kw.pop("segment_bytes", 600),
                     file_delete_delay_ms=kw.pop("file_delete_delay_ms", 0), **kw)


def put(log: Log, pairs, compression: int = 0, producer_id: int = -1) -> None:
    recs = [(k, v, NOW, []) for k, v in pairs]
    log.append(bytearray(records.build_batch(recs, compression=compression,
                                             producer_id=producer_id)))


def consume(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record, fetching as a consumer does: from the next
    offset after each batch (batches may end in offsets that compaction emptied)."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if data.file_region is None:
            break
        raw = region_bytes(data)
        out += [(r.offset, r.key, r.value) for r in records.iter_records(raw) if r.offset >= offset]
        pos = last = 0
        while pos < len(raw):
            h = records.parse_batch_header(raw, pos)
            pos, last = pos + h.size, h.next_offset
        offset = last
    return out


def latest(log_records):
    final = {}
    for offset, key, value in log_records:
        final[key] = (offset, value)
    return final


@pytest.fixture
def log(tmp_path):
    lg = Log(str(tmp_path / "t-0"), compacted())
    yield lg
    lg.close()


def fill(log: Log, rounds: int = 40, keys: int = 3, compression: int = 0) -> None:
    for i in range(rounds):
        put(log, [(b"k%d" % (i % keys), b"v%d" % i), (b"k%d" % ((i + 1) % keys), b"w%d" % i)],
            compression)


def test_compaction_keeps_latest_value_per_key_at_original_offsets(log):
    fill(log)
    before = consume(log)
    active_base = log.active_segment.base_offset
    expected = {k: v for k, v in latest(before).items()}
    size_before = log.size_bytes
    stats = LogCleaner().clean_log(log, NOW)
    assert stats is not None and stats.records_removed > 0
    after = consume(log)
    assert log.size_bytes < size_before
    assert [o for o, _, _ in after] == sorted(o for o, _, _ in after)
    assert set(after) <= set(before)  # same offsets, keys, values
    assert latest(after) == expected
    # Below the active segment one record per key remains; the active one is untouched.
    cleaned = [r for r in after if r[0] < active_base]
    assert len({k for _, k, _ in cleaned}) == len(cleaned)
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    assert log.active_segment.base_offset == active_base
    for seg in log.segments:
        with open(seg.path, "rb") as f:
            records.validate_batches(f.read())
    ckpt = read_offset_checkpoint(os.path.join(os.path.dirname(log.dir), CLEANER_CHECKPOINT))
    assert ckpt == {("t", 0): active_base}


def test_cleaned_log_survives_reopen(tmp_path):
    lg = Log(str(tmp_path / "t-0"), compacted())
    fill(lg)
    LogCleaner().clean_log(lg, NOW)
    want = consume(lg)
    lg.close()
    again = Log(str(tmp_path / "t-0"), compacted())
    try:
        assert consume(again) == want
        put(again, [(b"k0", b"new")])
        assert latest(consume(again))[b"k0"][1] == b"new"
    finally:
        again.close()


def test_dirty_ratio_below_minimum_is_left_alone(log):
    fill(log, rounds=20)
    assert LogCleaner().clean_log(log, NOW) is not None
    before = consume(log)
    put(log, [(b"k0", b"x")])
    log.roll()
    # A single new batch is a small share of the log: under min.cleanable.dirty.ratio 0.99.
    log.update_config(compacted(min_cleanable_dirty_ratio=0.99))
    assert LogCleaner().clean_log(log, NOW) is None
    assert consume(log)[:len(before)] == before


def test_tombstones_kept_before_delete_retention_and_removed_after(log):
    fill(log, rounds=20)
    put(log, [(b"k1", None)])
    fill(log, rounds=10, keys=1)  # only k0 afterwards: the tombstone stays latest for k1
    tombstone_offset = next(o for o, k, v in consume(log) if k == b"k1" and v is None)
    cleaner = LogCleaner()
    now = int(time.time() * 1000)
    cleaner.clean_log(log, now, force=True)
    assert latest(consume(log))[b"k1"] == (tombstone_offset, None)
    # delete.retention.ms after the segment was last written, the tombstone goes.
    assert cleaner.clean_log(log, now + DAY_MS + 1000, force=True) is None  # nothing dirty
    put(log, [(b"k0", b"again")])
    log.roll()
    stats = cleaner.clean_log(log, now + DAY_MS + 1000, force=True)
    assert stats is not None and stats.tombstones_removed == 1
    assert b"k1" not in latest(consume(log))


def test_min_compaction_lag_keeps_recent_segments_dirty(tmp_path):
    lg = Log(str(tmp_path / "t-0"), compacted(min_compaction_lag_ms=DAY_MS))
    try:
        fill(lg)  # record timestamps NOW
        assert LogCleaner().clean_log(lg, NOW + 1000, force=True) is None
        assert LogCleaner().clean_log(lg, NOW + DAY_MS + 1000, force=True) is not None
    finally:
        lg.close()


@pytest.mark.parametrize("codec", [records.CODEC_GZIP, records.CODEC_SNAPPY, records.CODEC_LZ4,
                                   records.CODEC_ZSTD])
def test_compressed_batches_are_recompressed_with_their_codec(log, codec):
    fill(log, compression=codec)
    before = consume(log)
    LogCleaner().clean_log(log, NOW)
    after = consume(log)
    assert latest(after) == latest(before)
    assert len(after) < len(before)
    headers = []
    for seg in log.segments:
        with open(seg.path, "rb") as f:
            headers += records.validate_batches(f.read(), decompress=True)
    assert {h.compression for h in headers} == {codec}
    assert any(h.records_count == 1 for h in headers)  # rebuilt with one record of two


def test_batches_keep_offset_range_and_producer_fields(log):
    for i in range(30):
        log.append(bytearray(records.build_batch(
            [(b"a", b"%d" % i, NOW, []), (b"b%d" % (i % 2), b"%d" % i, NOW, [])],
            producer_id=7, producer_epoch=1, base_sequence=2 * i)))
    before = {}
    for seg in log.segments:
        with open(seg.path, "rb") as f:
            before.update({h.base_offset: h for h in records.validate_batches(f.read())})
    LogCleaner().clean_log(log, NOW)
    for seg in log.segments:
        with open(seg.path, "rb") as f:
            for h in records.validate_batches(f.read()):
                old = before[h.base_offset]
                assert (h.last_offset, h.producer_id, h.producer_epoch, h.base_sequence) == \
                    (old.last_offset, old.producer_id, old.producer_epoch, old.base_sequence)


def test_reader_of_a_replaced_segment_still_reads_it(tmp_path):
    lg = Log(str(tmp_path / "t-0"), compacted(file_delete_delay_ms=60_000))
    try:
        fill(lg)
        region = lg.read(0, 1 << 20).file_region
        held = os.pread(region.fd, region.size, region.position)
        LogCleaner().clean_log(lg, NOW)
        assert lg.pending_deletes > 0
        assert os.pread(region.fd, region.size, region.position) == held
        assert any(name.endswith(".deleted") for name in os.listdir(lg.dir))
    finally:
        lg.close()


def test_crash_leftovers_are_finished_or_discarded_on_open(tmp_path):
    directory = tmp_path / "t-0"
    lg = Log(str(directory), compacted())
    fill(lg)
    want = latest(consume(lg))
    all_before = consume(lg)
    segs = lg.segments[:-1]
    first = segs[0]
    lg.close()
    # Interrupted before the swap: a half-written .cleaned file is discarded.
    (directory / (os.path.basename(first.path) + ".cleaned")).write_bytes(b"\0" * 100)
    lg = Log(str(directory), compacted())
    assert consume(lg) == all_before
    # Interrupted mid-swap: the cleaned copy of the first two segments as .swap, the
    # second old segment already gone, the first still in place.
    cleaned = bytearray()
    for seg in lg.segments[:2]:
        with open(seg.path, "rb") as f:
            data = f.read()
        for h, pos in _positions(data):
            if h.base_offset % 2 == 0:  # any subset of whole batches stands in for a clean
                cleaned += data[pos:pos + h.size]
    second = lg.segments[1]
    lg.close()
    (directory / (os.path.basename(first.path) + ".swap")).write_bytes(bytes(cleaned))
    os.unlink(second.path)
    lg = Log(str(directory), compacted())
    try:
        assert not [n for n in os.listdir(directory) if n.endswith((".swap", ".cleaned"))]
        got = consume(lg)
        assert set(got) <= set(all_before)
        assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)
        assert {r for r in all_before if r[0] >= second.next_offset} <= set(got)
        # And the cleaner on top of the recovered log still yields the latest values.
        LogCleaner().clean_log(lg, NOW, force=True)
        assert all(latest(consume(lg))[k] == v for k, v in want.items()
                   if v[0] >= second.next_offset)
    finally:
        lg.close()
    assert len(segs) >= 2


def _positions(data):
    pos = 0
    while pos < len(data):
        h = records.parse_batch_header(data, pos)
        yield h, pos
        pos += h.size


def test_compacted_topic_refuses_records_without_key(log):
    keys = [None if i % 3 == 1 else b"k%d" % i for i in range(7)]
    with pytest.raises(InvalidRecords) as err:
        log.append(bytearray(records.build_batch([(key, b"v", NOW, []) for key in keys])))
    # Every keyless record is named by its index in the batch (KIP-467), not only the first.
    assert err.value.code == ErrorCode.INVALID_RECORD
    assert [index for index, _message in err.value.record_errors] == [1, 4]
    assert "without a key" in err.value.record_errors[0][1]
    assert log.log_end_offset == 0
    # A delete-policy log takes them.
    plain = Log(str(log.dir) + "x-0", LogConfig())
    try:
        plain.append(bytearray(records.build_batch([(None, b"v", NOW, [])])))
        assert plain.log_end_offset == 1
    finally:
        plain.close()


def test_log_manager_runs_the_cleaner(tmp_path):
    from pykfk.log.manager import LogManager

    manager = LogManager([str(tmp_path)], LogConfig(), broker_id=0)
    manager.open()
    try:
        lg = manager.create_log("c", 0, compacted())
        other = manager.create_log("d", 0, LogConfig(segment_bytes=600))
        fill(lg)
        fill(other)
        before_other = consume(other)
        stats = manager.run_cleaner(NOW)
        assert len(stats) == 1
        assert consume(other) == before_other
        assert len(consume(lg)) < 80
    finally:
        manager.shutdown()


def test_kafka_python_reads_a_compacted_topic_through_the_broker(tmp_path):
    """End to end with kafka-python. The broker config has no log.cleaner.backoff.ms yet,
    so the test runs the cleaner pass itself (on the broker's loop, as the task would)."""
    import kafka
    from kafka.admin import NewTopic

    from pykfk.testing import InProcessBroker

    broker = InProcessBroker(str(tmp_path / "data")).start()
    try:
        admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic("compacted", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": "2000"})])
        admin.close()
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
        sent = {}
        for i in range(300):
            key = b"key-%d" % (i % 5)
            value = b"value-%d" % i
            producer.send("compacted", key=key, value=value).get(timeout=10)
            sent[key] = value
        producer.close()
        manager = broker.broker.log_manager

        async def clean():
            import asyncio
            return await asyncio.get_running_loop().run_in_executor(
                None, manager.run_cleaner)

        stats = broker.call(clean)
        assert stats and stats[0].records_removed > 0
        consumer = kafka.KafkaConsumer("compacted", bootstrap_servers=broker.bootstrap,
                                       auto_offset_reset="earliest", consumer_timeout_ms=3000,
                                       enable_auto_commit=False)
        got = [(m.offset, m.key, m.value) for m in consumer]
        consumer.close()
        assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)
        assert got[-1][0] == 299
        assert len(got) < 300
        assert {k: v for _, k, v in got} == sent
    finally:
        broker.stop()


# -- transaction markers ---------------------------------------------------------------

PID_A, PID_B, PID_C = 1000, 2000, 3000


def txn_put(log: Log, pid: int, seq: int, pairs, epoch: int = 0) -> int:
    """A transactional batch of ``pairs``; returns its first offset."""
    recs = [(k, v, NOW, []) for k, v in pairs]
    return log.append(bytearray(records.build_batch(
        recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
        is_transactional=True))).first_offset


def end_txn(log: Log, pid: int, commit: bool, epoch: int = 0) -> int:
    """A COMMIT or ABORT marker; returns its offset."""
    return log.append_marker(pid, epoch, commit, coordinator_epoch=0, now_ms=NOW).first_offset


def filler(log: Log, count: int = 8) -> None:
    """Plain records of one key, enough to roll past what came before: the segments before
    the active one are cleanable, and the next cleaning has something dirty."""
    for i in range(count):
        put(log, [(b"filler", b"x" * 40 + b"%d" % i)])


def log_batches(log: Log) -> list[tuple[records.BatchHeader, bytes]]:
    """(header, bytes) of every batch in the log's segment files, in offset order."""
    out = []
    for seg in log.segments:
        data = os.pread(seg.fileno(), seg.size, 0)
        out += [(h, data[pos:pos + h.size]) for h, pos in _positions(data)]
    return out


def markers(log: Log) -> dict[int, records.BatchHeader]:
    """The control batches of the log by offset."""
    return {h.base_offset: h for h, _ in log_batches(log) if h.is_control}


def read_committed(log: Log) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) a read_committed consumer gets from the log start: batches up
    to the last stable offset, those of the aborted transactions the log reports for the
    range skipped as Kafka's consumer does (a producer id is aborted from the first offset
    of its aborted transaction until its ABORT marker)."""
    lso = log.last_stable_offset
    pending = sorted(log.aborted_transactions(log.log_start_offset, lso),
                     key=lambda t: t.first_offset)
    aborted_pids: set[int] = set()
    out = []
    for h, raw in log_batches(log):
        if h.base_offset >= lso:
            break
        while pending and pending[0].first_offset <= h.last_offset:
            aborted_pids.add(pending.pop(0).producer_id)
        if h.is_control:
            if marker_type(raw) == ABORT:
                aborted_pids.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborted_pids:
            continue
        out += [(r.offset, r.key, r.value) for r in records.iter_records(raw)
                if r.offset >= log.log_start_offset]
    return out


def test_aborted_transaction_marker_goes_only_after_delete_retention(tmp_path):
    lg = Log(str(tmp_path / "t-0"), compacted(delete_retention_ms=DAY_MS))
    try:
        txn_put(lg, PID_A, 0, [(b"a1", b"aborted-1"), (b"a2", b"aborted-2")])  # 0-1
        abort = end_txn(lg, PID_A, commit=False)                                  # 2
        committed = txn_put(lg, PID_A, 2, [(b"a3", b"committed")])              # 3
        commit = end_txn(lg, PID_A, commit=True)                                  # 4
        filler(lg)
        assert [t.last_offset for t in lg.aborted_transactions(0, lg.log_end_offset)] == [abort]
        cleaner = LogCleaner()

        # The aborted records go at once; their marker stays, with a delete horizon.
        stats = cleaner.clean_log(lg, NOW, force=True)
        assert stats is not None and stats.markers_removed == 0
        keys = {k for _, k, _ in consume(lg)}
        assert b"a1" not in keys and b"a2" not in keys and b"a3" in keys
        kept = markers(lg)
        assert abort in kept and commit in kept
        assert kept[abort].attributes & DELETE_HORIZON_FLAG
        assert kept[abort].base_timestamp == NOW + DAY_MS
        assert not kept[commit].attributes & DELETE_HORIZON_FLAG  # its record is there
        # The stamped marker still reads as an ABORT marker with its own timestamp.
        raw = next(raw for h, raw in log_batches(lg) if h.base_offset == abort)
        records.validate_batches(raw)
        assert marker_type(raw) == ABORT
        assert [r.timestamp for r in records.iter_records(raw)] == [NOW]
        assert [t.last_offset for t in lg.aborted_transactions(0, lg.log_end_offset)] == [abort]

        # Just before the horizon: still there.
        filler(lg)
        stats = cleaner.clean_log(lg, NOW + DAY_MS - 1, force=True)
        assert stats is not None and stats.markers_removed == 0
        assert abort in markers(lg)
        assert lg.aborted_transactions(0, lg.log_end_offset)

        # From the horizon on: the marker and its aborted-transaction entry are gone.
        filler(lg)
        stats = cleaner.clean_log(lg, NOW + DAY_MS, force=True)
        assert stats is not None and stats.markers_removed == 1
        assert abort not in markers(lg)
        assert commit in markers(lg)  # ends a transaction whose record is still there
        assert lg.aborted_transactions(0, lg.log_end_offset) == []
        assert not [n for n in os.listdir(lg.dir) if n.endswith(".txnindex")]
        assert (committed, b"a3", b"committed") in read_committed(lg)
    finally:
        lg.close()


def test_committed_marker_stays_while_its_records_do(tmp_path):
    lg = Log(str(tmp_path / "t-0"), compacted(delete_retention_ms=DAY_MS))
    try:
        txn_put(lg, PID_C, 0, [(b"x", b"x-old")])        # 0, overwritten below
        first = end_txn(lg, PID_C, commit=True)           # 1
        y = txn_put(lg, PID_C, 1, [(b"y", b"y-kept")])    # 2, stays the latest of y
        second = end_txn(lg, PID_C, commit=True)          # 3
        z = txn_put(lg, PID_C, 2, [(b"z", b"z-old")])     # 4, overwritten, producer's last
        third = end_txn(lg, PID_C, commit=True)           # 5
        put(lg, [(b"x", b"x-new"), (b"z", b"z-new")])
        filler(lg)
        cleaner = LogCleaner()
        cleaner.clean_log(lg, NOW, force=True)
        for day in (2, 10, 30):  # well past delete.retention.ms, cleaned again and again
            filler(lg)
            assert cleaner.clean_log(lg, NOW + day * DAY_MS, force=True) is not None
        kept = markers(lg)
        # The first transaction's record is gone: its marker went after the horizon.
        assert first not in kept
        # The second one's record is still there: its marker stays, untouched.
        assert second in kept and not kept[second].attributes & DELETE_HORIZON_FLAG
        assert (y, b"y", b"y-kept") in consume(lg)
        # The third one's batch is its producer's last: emptied, not removed (the
        # producer's sequence survives a reload), so its transaction and marker stay.
        last = {h.base_offset: h for h, _ in log_batches(lg)}[z]
        assert last.records_count == 0 and last.producer_id == PID_C and last.base_sequence == 2
        assert third in kept
        committed = {k: v for _, k, v in read_committed(lg)}
        assert committed[b"x"] == b"x-new" and committed[b"y"] == b"y-kept"
        assert committed[b"z"] == b"z-new"
    finally:
        lg.close()


@pytest.mark.parametrize("clean_shutdown", [True, False])
def test_read_committed_and_recovery_after_markers_are_cleaned(tmp_path, clean_shutdown):
    lg = Log(str(tmp_path / "t-0"), compacted(delete_retention_ms=DAY_MS))
    txn_put(lg, PID_A, 0, [(b"k1", b"aborted-a"), (b"k2", b"aborted-a")])  # A open
    put(lg, [(b"k3", b"plain")])
    txn_put(lg, PID_B, 0, [(b"k1", b"committed-b")])                      # B open
    a_abort = end_txn(lg, PID_A, commit=False)
    txn_put(lg, PID_B, 1, [(b"k2", b"committed-b")])
    end_txn(lg, PID_B, commit=True)
    txn_put(lg, PID_A, 2, [(b"k4", b"committed-a")])
    end_txn(lg, PID_A, commit=True)
    txn_put(lg, PID_C, 0, [(b"k5", b"aborted-c")])   # C's only batch, aborted
    c_abort = end_txn(lg, PID_C, commit=False)
    filler(lg)
    expected = latest(read_committed(lg))
    assert not [v for _, v in expected.values() if v.startswith(b"aborted")]
    cleaner = LogCleaner()
    cleaner.clean_log(lg, NOW, force=True)
    filler(lg)
    stats = cleaner.clean_log(lg, NOW + 2 * DAY_MS, force=True)
    assert stats is not None and stats.markers_removed == 1
    assert a_abort not in markers(lg)
    # C's aborted batch is its producer's last: kept empty, so its abort stays known.
    assert c_abort in markers(lg)
    assert [(t.producer_id, t.last_offset)
            for t in lg.aborted_transactions(0, lg.log_end_offset)] == [(PID_C, c_abort)]
    got = read_committed(lg)
    assert {k: v for k, (_, v) in latest(got).items()} == {k: v for k, (_, v) in expected.items()}
    assert not [v for _, _, v in got if v.startswith(b"aborted")]
    lso, end = lg.last_stable_offset, lg.log_end_offset
    assert lso == end
    aborted = lg.aborted_transactions(0, end)
    producers = {pid: (e.producer_epoch, e.last_seq) for pid, e in lg.producer_state.producers.items()}

    if clean_shutdown:
        lg.close()
    else:
        lg.flush()  # a kill -9: no close, no producer snapshot at the end
    again = Log(str(tmp_path / "t-0"), compacted(delete_retention_ms=DAY_MS),
                clean_shutdown=clean_shutdown)
    try:
        assert again.log_end_offset == end and again.last_stable_offset == lso
        assert again.aborted_transactions(0, end) == aborted
        assert read_committed(again) == got
        assert {pid: (e.producer_epoch, e.last_seq)
                for pid, e in again.producer_state.producers.items()} == producers
        # The producers go on where they were: A's next sequence is accepted, and a new
        # transaction moves the last stable offset and commits.
        txn_put(again, PID_A, producers[PID_A][1] + 1, [(b"k6", b"after")])
        assert again.last_stable_offset == end
        end_txn(again, PID_A, commit=True)
        assert again.last_stable_offset == again.log_end_offset
        assert latest(read_committed(again))[b"k6"][1] == b"after"
    finally:
        again.close()
        if not clean_shutdown:
            lg.close()
