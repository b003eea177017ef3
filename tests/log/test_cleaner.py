"""Log compaction over real files: what a consumer reads after the cleaner ran."""

from __future__ import annotations

import os
import time

import pytest

from pykfk._core import records
from pykfk._core.errors import InvalidRecordError
from pykfk.log.checkpoints import read_offset_checkpoint
from pykfk.log.cleaner import CLEANER_CHECKPOINT, LogCleaner
from pykfk.log.config import LogConfig
from pykfk.log.log import Log
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
    with pytest.raises(InvalidRecordError) as err:
        log.append(bytearray(records.build_batch([(b"k", b"v", NOW, []), (None, b"v", NOW, [])])))
    assert err.value.field == "record.key"
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
