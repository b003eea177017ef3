"""pykfk._core.records: building, validating, patching and reading magic 2 batches.

Most tests run against both the compiled module and the pure-Python reference (`impl`)."""

from __future__ import annotations

import mmap
import struct

import crc32c as crc32c_pkg
import pytest
from _records_helpers import CODECS, make_batch, record_bytes
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pykfk._core import records as core
from pykfk._core.errors import CorruptBatchError, InvalidRecordError, RecordTooLargeError
from pykfk._reference import records as reference

HEADER_FIELDS = ("base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
                 "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "records_count")


@pytest.fixture(params=["core", "reference"])
def impl(request):
    return core if request.param == "core" else reference


def header_tuple(h) -> tuple:
    return tuple(getattr(h, f) for f in HEADER_FIELDS)


def record_tuples(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


SAMPLE = [
    (b"k0", b"v0", 1_000, [("h", b"x"), ("null", None)]),
    (None, b"v1" * 50, 1_005, []),
    (b"k2", None, 999, [("h\u00e9", b"")]),
    (b"", b"", 1_010, ()),
]


def expected(records, base_offset=0):
    return [(base_offset + i, ts, k, v, [(hk, hv) for hk, hv in h])
            for i, (k, v, ts, h) in enumerate(records)]


# --- building and reading -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_build_then_read_back(impl, codec):
    batch = impl.build_batch(SAMPLE, compression=codec, base_offset=40)
    (h,) = impl.validate_batches(batch, decompress=True)
    assert (h.compression, h.records_count, h.last_offset_delta) == (codec, 4, 3)
    assert (h.base_timestamp, h.max_timestamp) == (1_000, 1_010)
    assert (h.base_offset, h.last_offset, h.size) == (40, 43, len(batch))
    assert record_tuples(impl.iter_records(batch)) == expected(SAMPLE, 40)


@pytest.mark.parametrize("codec", CODECS)
def test_compiled_and_reference_build_identical_bytes(codec):
    kwargs = {"compression": codec, "producer_id": 7, "producer_epoch": 2, "base_sequence": 11,
              "partition_leader_epoch": 3, "is_transactional": True}
    assert core.build_batch(SAMPLE, **kwargs) == reference.build_batch(SAMPLE, **kwargs)


def test_batch_level_fields_reach_records():
    batch = core.build_batch(SAMPLE[:2], producer_id=99, producer_epoch=4, base_sequence=10,
                             partition_leader_epoch=5, is_transactional=True, base_offset=100)
    h = core.parse_batch_header(batch)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.partition_leader_epoch) == (99, 4, 10, 5)
    assert h.is_transactional and not h.is_control and h.timestamp_type == 0
    r0, r1 = core.iter_records(batch)
    assert (r0.producer_id, r0.producer_epoch, r0.partition_leader_epoch) == (99, 4, 5)
    assert (r0.sequence, r1.sequence) == (10, 11)
    assert r1.batch == h and r1.is_transactional


def test_build_rejects_bad_arguments():
    with pytest.raises(ValueError):
        core.build_batch([])
    with pytest.raises(ValueError):
        core.build_batch(SAMPLE, compression=5)
    with pytest.raises(TypeError):
        core.build_batch([(b"k", 42, 0, [])])
    with pytest.raises(TypeError):
        core.build_batch([(b"k", b"v", 0, [(None, b"x")])])


keys = st.one_of(st.none(), st.binary(max_size=40))
headers = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16))),
                   max_size=3)
records_strategy = st.lists(
    st.tuples(keys, keys, st.integers(-(2**40), 2**40), headers), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(records=[(None, None, -2, [])], codec=0, base=0, log_append=True)   # max_timestamp < -1
@given(records=records_strategy, codec=st.sampled_from(CODECS),
       base=st.integers(0, 2**62), log_append=st.booleans())
def test_roundtrip_property(records, codec, base, log_append):
    batch = core.build_batch(records, compression=codec, base_offset=base,
                             timestamp_type=1 if log_append else 0)
    assert core.validate_batches(batch, decompress=True, from_client=True)[0].compression == codec
    got = record_tuples(core.iter_records(batch))
    want = expected(records, base)
    if log_append:  # LogAppendTime: every record carries the batch's max_timestamp
        top = max(r[2] for r in records)
        want = [(o, top, k, v, h) for o, _, k, v, h in want]
    assert got == want
    assert record_tuples(reference.iter_records(batch)) == want
    decoded = core.decode_records(batch)
    assert record_tuples(decoded) == want
    assert list(decoded.offsets) == [w[0] for w in want]


# --- validation -----------------------------------------------------------------------


def test_empty_buffer_is_no_batches(impl):
    assert impl.validate_batches(b"") == []
    assert impl.scan_batches(b"") == (0, 0)
    assert list(impl.iter_records(b"")) == []


def test_validate_many_batches_reports_positions(impl):
    a = impl.build_batch(SAMPLE[:1])
    b = impl.build_batch(SAMPLE, compression=1)
    buf = a + b + a
    hs = impl.validate_batches(buf)
    assert [h.size for h in hs] == [len(a), len(b), len(a)]
    damaged = bytearray(buf)
    damaged[len(a) + len(b) + 30] ^= 1
    with pytest.raises(CorruptBatchError) as info:
        impl.validate_batches(damaged)
    assert (info.value.field, info.value.offset) == ("crc", len(a) + len(b))
    assert info.value.field_offset == len(a) + len(b) + 17


def test_max_batch_size(impl):
    batch = impl.build_batch(SAMPLE)
    assert impl.validate_batches(batch, max_batch_size=len(batch))
    with pytest.raises(RecordTooLargeError) as info:
        impl.validate_batches(batch, max_batch_size=len(batch) - 1)
    assert isinstance(info.value, CorruptBatchError) and info.value.field == "batch_length"
    # even a truncated batch that would be too large is named as too large
    with pytest.raises(RecordTooLargeError):
        impl.validate_batches(batch[:70], max_batch_size=len(batch) - 1)


def test_producer_rules_only_when_asked(impl):
    """Offset gaps are legal in stored (compacted) batches, not from a producer."""
    area = record_bytes(0, b"a", b"1") + record_bytes(2, b"b", b"2")
    gappy = make_batch(area, records_count=2, last_offset_delta=2)
    assert impl.validate_batches(gappy)[0].records_count == 2
    with pytest.raises(InvalidRecordError) as info:
        impl.validate_batches(gappy, from_client=True)
    assert info.value.field == "last_offset_delta"
    empty = make_batch(b"", records_count=0, last_offset_delta=0)
    assert impl.validate_batches(empty)[0].records_count == 0
    with pytest.raises(InvalidRecordError) as info:
        impl.validate_batches(empty, from_client=True)
    assert info.value.field == "records_count"
    # deltas 1, 2 with last_offset_delta 1 + count 2 claim: index mismatch under producer rules
    shifted = make_batch(record_bytes(1, b"a", b"1") + record_bytes(2, b"b", b"2"), 2, 2)
    with pytest.raises(InvalidRecordError):
        impl.validate_batches(shifted, from_client=True)


def test_check_records_off_skips_the_record_walk(impl):
    bad = make_batch(record_bytes(0, b"a", b"1") + b"\x00", records_count=1, last_offset_delta=0)
    with pytest.raises(InvalidRecordError):
        impl.validate_batches(bad)
    assert impl.validate_batches(bad, check_records=False)[0].records_count == 1


def test_compressed_records_checked_only_with_decompress(impl):
    inner = record_bytes(0, b"a", b"1") + record_bytes(0, b"b", b"2")  # repeated delta
    import cramjam

    batch = make_batch(bytes(cramjam.zstd.compress(inner)), records_count=2, last_offset_delta=1,
                       attributes=4)
    assert impl.validate_batches(batch)[0].compression == 4
    with pytest.raises(InvalidRecordError) as info:
        impl.validate_batches(batch, decompress=True)
    assert info.value.field == "record.offset_delta"


# --- in-place patches -----------------------------------------------------------------


def test_assign_offsets_keeps_crc(impl):
    batches = [impl.build_batch(SAMPLE, compression=c) for c in (0, 1, 4)]
    buf = bytearray(b"".join(batches))
    crcs = [h.crc for h in impl.validate_batches(buf)]
    assert impl.assign_offsets(buf, 1_000, 9) == 1_012
    hs = impl.validate_batches(buf, decompress=True)
    assert [h.crc for h in hs] == crcs
    assert [(h.base_offset, h.partition_leader_epoch) for h in hs] == [(1_000, 9), (1_004, 9), (1_008, 9)]
    assert [r.offset for r in impl.iter_records(buf)] == list(range(1_000, 1_012))


def test_assign_offsets_same_bytes_both_impls():
    buf_a = bytearray(core.build_batch(SAMPLE) * 3)
    buf_b = bytearray(buf_a)
    assert core.assign_offsets(buf_a, 5, 2) == reference.assign_offsets(buf_b, 5, 2)
    assert buf_a == buf_b


def test_assign_offsets_leaves_a_bad_buffer_untouched(impl):
    good = impl.build_batch(SAMPLE)
    buf = bytearray(good + good[:-1])
    before = bytes(buf)
    with pytest.raises(CorruptBatchError):
        impl.assign_offsets(buf, 10)
    assert bytes(buf) == before


def test_set_log_append_time(impl):
    buf = bytearray(impl.build_batch(SAMPLE) + impl.build_batch(SAMPLE, compression=2))
    impl.set_log_append_time(buf, 123_456)
    hs = impl.validate_batches(buf, decompress=True)
    assert all(h.timestamp_type == 1 and h.max_timestamp == 123_456 for h in hs)
    assert {r.timestamp for r in impl.iter_records(buf)} == {123_456}
    assert [h.base_timestamp for h in hs] == [1_000, 1_000]


def test_set_log_append_time_same_bytes_both_impls():
    a = bytearray(core.build_batch(SAMPLE, compression=3))
    b = bytearray(a)
    core.set_log_append_time(a, 77)
    reference.set_log_append_time(b, 77)
    assert a == b


def test_patches_need_a_writable_buffer():
    batch = core.build_batch(SAMPLE)
    with pytest.raises(BufferError):
        core.assign_offsets(batch, 0)
    with pytest.raises(BufferError):
        core.set_log_append_time(memoryview(batch), 0)


# --- scan, partial tails, buffers -----------------------------------------------------


def test_scan_batches_reports_partial_tail(impl):
    a = impl.build_batch(SAMPLE)
    buf = a + a + a[:50]
    assert impl.scan_batches(buf) == (2, 2 * len(a))
    assert impl.scan_batches(buf, len(a)) == (1, len(a))
    assert impl.scan_batches(a[:5]) == (0, 0)
    assert len(list(impl.iter_records(buf))) == 8   # the partial batch is dropped silently
    with pytest.raises(CorruptBatchError):
        impl.scan_batches(a + b"\xff" * 61)             # impossible, not partial


def test_parse_batch_header(impl):
    batch = impl.build_batch(SAMPLE, base_offset=5, producer_id=3, producer_epoch=1, base_sequence=0)
    h = impl.parse_batch_header(b"junk" + batch, 4)
    assert (h.base_offset, h.producer_id, h.records_count, h.magic) == (5, 3, 4, 2)
    assert h.crc == crc32c_pkg.crc32c(batch[21:])
    with pytest.raises(CorruptBatchError):
        impl.parse_batch_header(batch[:60])


def test_header_object_is_read_only():
    h = core.parse_batch_header(core.build_batch(SAMPLE))
    with pytest.raises(AttributeError):
        h.base_offset = 3
    with pytest.raises(TypeError):
        core.BatchHeader()


def test_every_buffer_kind_is_accepted():
    batch = core.build_batch(SAMPLE)
    with mmap.mmap(-1, len(batch)) as mm:
        mm[:] = batch
        for buf in (batch, bytearray(batch), memoryview(batch), memoryview(bytearray(batch)), mm):
            assert core.validate_batches(buf)[0].records_count == 4
            assert len(list(core.iter_records(buf))) == 4
            assert len(core.decode_records(buf)) == 4
        writable = bytearray(batch)
        assert core.assign_offsets(memoryview(writable), 3) == 7
        core.assign_offsets(mm, 8)
        assert core.parse_batch_header(mm).base_offset == 8
    # mm closed fine above: no export was kept


def test_non_contiguous_buffer_is_rejected():
    batch = core.build_batch(SAMPLE)
    strided = memoryview(batch + batch)[::2]
    with pytest.raises(BufferError):
        core.validate_batches(strided)


def test_iter_records_does_not_hold_the_buffer():
    batch = core.build_batch(SAMPLE)
    mm = mmap.mmap(-1, len(batch) * 2)
    mm[:] = batch + batch
    it = core.iter_records(mm)
    next(it)
    mm.close()   # a suspended iterator keeps no buffer export


# --- columnar decode ------------------------------------------------------------------


def test_decode_records_columns():
    a = core.build_batch(SAMPLE, base_offset=10)
    b = core.build_batch(SAMPLE[:2], base_offset=14, compression=4)
    d = core.decode_records(a + b + a[:30], start_offset=12)
    assert list(d.offsets) == [12, 13, 14, 15]
    assert d.offsets.typecode == "q" and d.timestamps.typecode == "q"
    assert list(d.timestamps) == [999, 1_010, 1_000, 1_005]
    assert d.next_offset == 16 and d.bytes_consumed == len(a) + len(b)
    assert [d.key(i) for i in range(4)] == [b"k2", b"", b"k0", None]
    assert d.value(0) is None and d.value(3) == b"v1" * 50
    assert d.headers(0) == [("h\u00e9", b"")] and d.headers(2) == [("h", b"x"), ("null", None)]
    assert list(d.key_lengths) == [2, 0, 2, -1]
    start, length = d.value_starts[3], d.value_lengths[3]
    assert d.data[start:start + length] == b"v1" * 50
    assert len(d.batches) == 2 and list(d.batch_index) == [0, 0, 1, 1]
    assert d[2].batch.compression == 4 and d[-1].offset == 15
    assert isinstance(d.data, bytes)


def test_decode_records_skips_control_batches_unless_asked():
    data = core.build_batch([(b"k", b"v", 5, [])], base_offset=0)
    marker = core.build_batch([(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", 6, [])],
                              base_offset=1, is_control=True, is_transactional=True,
                              producer_id=1, producer_epoch=0)
    d = core.decode_records(data + marker)
    assert list(d.offsets) == [0] and d.next_offset == 2
    d = core.decode_records(data + marker, include_control=True)
    assert list(d.offsets) == [0, 1] and d[1].is_control
    assert [r.is_control for r in core.iter_records(data + marker)] == [False, True]


def test_decompression_is_bounded():
    import cramjam

    area = record_bytes(0, None, b"\x00" * (4 << 20))
    bomb = make_batch(bytes(cramjam.zstd.compress(area)), records_count=1, last_offset_delta=0,
                      attributes=4)
    assert len(bomb) < 2_000
    with pytest.raises(RecordTooLargeError) as info:
        core.decode_records(bomb, max_decompressed_size=1 << 20)
    assert info.value.field == "records"
    with pytest.raises(RecordTooLargeError):
        core.validate_batches(bomb, decompress=True, max_decompressed_size=1 << 20)
    assert core.decode_records(bomb, max_decompressed_size=8 << 20).value_lengths[0] == 4 << 20


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_undecodable_compressed_payload(codec):
    batch = make_batch(b"\x82SNAPPY\x00" + b"garbage" * 5, records_count=1, last_offset_delta=0,
                       attributes=codec)
    assert core.validate_batches(batch)   # framing and CRC are fine
    with pytest.raises(CorruptBatchError) as info:
        core.decode_records(batch)
    assert info.value.field == "records" and info.value.field_offset == 61


def test_snappy_raw_and_xerial_both_read():
    import cramjam

    area = b"".join(record_bytes(i, b"k%d" % i, b"v" * 100) for i in range(3))
    raw = make_batch(bytes(cramjam.snappy.compress_raw(area)), 3, 2, attributes=2)
    xerial = core.build_batch([(b"k%d" % i, b"v" * 100, 1_000, []) for i in range(3)], compression=2)
    assert xerial[61:69] == b"\x82SNAPPY\x00"
    assert record_tuples(core.iter_records(raw)) == record_tuples(core.iter_records(xerial))


def test_header_checks_struct_layout():
    """BatchHeader's attributes are Kafka's int16, as BATCH_HEADER_FORMAT reads them."""
    batch = bytearray(core.build_batch(SAMPLE))
    struct.pack_into(">H", batch, 21, 0x8000)
    h = core.parse_batch_header(batch)
    assert h.attributes == -0x8000 == struct.unpack_from(core.BATCH_HEADER_FORMAT, batch)[5]
    assert h.compression == 0


def test_the_batch_layout_has_one_owner_and_the_oracle_agrees():
    import struct

    from pykfk._core import records as core
    from pykfk._reference import records as oracle
    from pykfk._reference import segment as oracle_segment

    assert core.BATCH_HEADER_SIZE == struct.calcsize(core.BATCH_HEADER_FORMAT) == oracle.HEADER_SIZE == 61
    assert core.LOG_OVERHEAD == oracle.LOG_OVERHEAD == oracle_segment.LOG_OVERHEAD == 12
    assert oracle_segment.HEADER_SIZE == core.BATCH_HEADER_SIZE
    assert core.BATCH_HEADER_FORMAT == oracle._HEADER.format
    offsets = core.BATCH_FIELD_OFFSETS
    assert (offsets["base_offset"], offsets["batch_length"], offsets["partition_leader_epoch"], offsets["magic"],
            offsets["crc"], offsets["attributes"]) == (oracle.BASE_OFFSET, oracle.LENGTH, oracle.LEADER_EPOCH,
                                                       oracle.MAGIC, oracle.CRC, oracle.ATTRIBUTES)
    assert (offsets["last_offset_delta"], offsets["max_timestamp"], offsets["records_count"]) == (
        oracle.LAST_OFFSET_DELTA, oracle.MAX_TIMESTAMP, oracle.RECORDS_COUNT)
    assert (core.ATTR_CODEC_MASK, core.ATTR_TIMESTAMP_TYPE, core.ATTR_TRANSACTIONAL, core.ATTR_CONTROL) == (
        oracle.ATTR_CODEC_MASK, oracle.ATTR_TIMESTAMP_TYPE, oracle.ATTR_TRANSACTIONAL, oracle.ATTR_CONTROL)
    # The struct format reads a header field for field as the core's parser does.
    batch = core.build_batch([(b"k", b"v", 1_700_000_000_000, [])], producer_id=7, producer_epoch=2, base_sequence=5)
    fields = struct.unpack_from(core.BATCH_HEADER_FORMAT, batch)
    h = core.parse_batch_header(batch)
    assert fields == (h.base_offset, h.batch_length, h.partition_leader_epoch, h.magic, h.crc, h.attributes,
                      h.last_offset_delta, h.base_timestamp, h.max_timestamp, h.producer_id, h.producer_epoch,
                      h.base_sequence, h.records_count)
