"""Damaged and hostile record batches: every flipped bit, every truncation, lying lengths.

Whatever the bytes, validation must end in a precise CorruptBatchError (or subclass), never a
crash, an out-of-bounds read or a large allocation; compiled core and reference must agree."""

from __future__ import annotations

import struct

import cramjam
import pytest
from _records_helpers import fix_crc, make_batch, record_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykfk._core import records as core
from pykfk._core.errors import CorruptBatchError, InvalidRecordError
from pykfk._reference import records as reference

# bytes 0-7 base_offset and 12-15 partition_leader_epoch are outside the CRC by design
UNCHECKED = set(range(8)) | set(range(12, 16))


@pytest.fixture(params=["core", "reference"])
def impl(request):
    return core if request.param == "core" else reference


@pytest.fixture(scope="module")
def small_batch() -> bytes:
    return core.build_batch([(b"k", b"value", 1_000, [("h", b"1")]), (None, b"v2", 1_001, [])])


def test_every_single_bit_flip(impl, small_batch):
    accepted, rejected = set(), 0
    for bit in range(len(small_batch) * 8):
        damaged = bytearray(small_batch)
        damaged[bit // 8] ^= 1 << (bit % 8)
        try:
            impl.validate_batches(damaged)
        except CorruptBatchError as exc:
            rejected += 1
            at = bit // 8
            if at >= 17:       # CRC field or CRC-covered bytes
                assert (exc.field, exc.offset, exc.field_offset) == ("crc", 0, 17), bit
            elif at == 16:
                assert exc.field == "magic"
        else:
            accepted.add(bit // 8)
    assert accepted == UNCHECKED
    assert rejected == (len(small_batch) - len(UNCHECKED)) * 8


def test_every_truncation(impl, small_batch):
    two = small_batch + small_batch
    for cut in range(1, len(two)):
        if cut == len(small_batch):
            continue
        with pytest.raises(CorruptBatchError) as info:
            impl.validate_batches(two[:cut])
        assert info.value.field == "batch_length"
        assert info.value.offset == (0 if cut < len(small_batch) else len(small_batch))
        count, complete = impl.scan_batches(two[:cut])
        assert (count, complete) == ((0, 0) if cut < len(small_batch) else (1, len(small_batch)))
        assert len(list(impl.iter_records(two[:cut]))) == (0 if cut < len(small_batch) else 2)


def _batch(area: bytes, count: int = 1, last: int = 0, **kw) -> bytes:
    return make_batch(area, records_count=count, last_offset_delta=last, **kw)


def _body(*parts: bytes) -> bytes:
    """A record whose length prefix is right for the given body bytes."""
    body = b"".join(parts)
    return reference.write_varint(len(body)) + body


V = reference.write_varint
TEN_BYTE_ZERO = b"\x80" * 9 + b"\x00"   # a varint of 10 bytes (value 0)

HOSTILE = {
    "record length beyond the batch": (_batch(V(500) + b"\x00" * 10), "record.length"),
    "negative record length": (_batch(V(-5) + b"\x00" * 10), "record.length"),
    "zero record length": (_batch(V(0)), "record.length"),
    "record length varint runs off": (_batch(b"\xff\xff"), "record.length"),
    "record length of 6 bytes": (_batch(b"\x80" * 5 + b"\x01"), "record.length"),
    "length varint with bits past 32": (_batch(b"\x80\x80\x80\x80\x7f" + b"\x00" * 8), "record.length"),
    "10-byte offset_delta varint": (_batch(_body(b"\x00", V(0), TEN_BYTE_ZERO, V(-1), V(-1), V(0))),
                                    "record.offset_delta"),
    "11-byte timestamp varlong": (_batch(_body(b"\x00", b"\x80" * 10 + b"\x00", V(0), V(-1), V(-1), V(0))),
                                  "record.timestamp_delta"),
    "10-byte varlong with bits past 64": (_batch(_body(b"\x00", b"\xff" * 9 + b"\x02", V(0), V(-1), V(-1), V(0))),
                                          "record.timestamp_delta"),
    "key longer than the record": (_batch(_body(b"\x00", V(0), V(0), V(100), b"k", V(-1), V(0))),
                                   "record.key"),
    "key length -2": (_batch(_body(b"\x00", V(0), V(0), V(-2), V(-1), V(0))), "record.key"),
    "value longer than the record": (_batch(_body(b"\x00", V(0), V(0), V(-1), V(2**31 - 1), V(0))),
                                     "record.value"),
    "huge header count": (_batch(_body(b"\x00", V(0), V(0), V(-1), V(-1), V(2**31 - 1))),
                          "record.header.key"),
    "negative header count": (_batch(_body(b"\x00", V(0), V(0), V(-1), V(-1), V(-3))), "record.headers"),
    "null header key": (_batch(_body(b"\x00", V(0), V(0), V(-1), V(-1), V(1), V(-1), V(-1))),
                        "record.header.key"),
    "header value past the record": (_batch(_body(b"\x00", V(0), V(0), V(-1), V(-1), V(1), V(1), b"h", V(9))),
                                     "record.header.value"),
    "fields shorter than record length": (_batch(_body(b"\x00", V(0), V(0), V(-1), V(-1), V(0), b"xx")),
                                          "record.length"),
    "records_count 2^31-1": (_batch(record_bytes(0, b"a", b"b"), count=2**31 - 1, last=2**31 - 2),
                             "records_count"),
    "negative records_count": (_batch(record_bytes(0, b"a", b"b"), count=-1), "records_count"),
    "fewer bytes than records": (_batch(record_bytes(0, b"a", b"b"), count=2, last=1), "records_count"),
    "bytes after the last record": (_batch(record_bytes(0, b"a", b"b") + b"\x02\x00", count=1),
                                    "records_count"),
    "offset_delta beyond last_offset_delta": (_batch(record_bytes(5, b"a", b"b"), count=1, last=0),
                                              "record.offset_delta"),
    "offset_delta going backwards": (_batch(record_bytes(1, b"a", b"b") + record_bytes(0, b"c", b"d"),
                                            count=2, last=1), "record.offset_delta"),
    "negative last_offset_delta": (_batch(b"", count=0, last=-1), "last_offset_delta"),
    "last_offset_delta below records_count - 1": (_batch(record_bytes(0, b"a", b"b") * 3, count=3, last=1),
                                                  "last_offset_delta"),
    "codec 5": (_batch(b"", count=0, attributes=5), "attributes"),
    "codec 7": (_batch(b"", count=0, attributes=7), "attributes"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_batch(impl, name):
    batch, field = HOSTILE[name]
    with pytest.raises(InvalidRecordError) as info:
        impl.validate_batches(batch)
    assert info.value.field == field
    assert 0 <= info.value.field_offset <= len(batch)   # == len: where a missing record would start
    # the readers refuse the same bytes
    with pytest.raises(CorruptBatchError):
        list(impl.iter_records(batch))
    if impl is core:
        with pytest.raises(CorruptBatchError):
            core.decode_records(batch)


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_batch_compressed(name):
    """The same records, zstd-compressed: caught when decompressing, never decoded."""
    batch, field = HOSTILE[name]
    h = struct.unpack_from(">H", batch, 21)[0]
    if h & 7 or name.startswith(("negative records_count", "negative last", "last_offset_delta below")):
        return
    packed = fix_crc(batch[:21] + struct.pack(">H", 4) + batch[23:61] + bytes(cramjam.zstd.compress(batch[61:])))
    packed = struct.pack(">qi", 0, len(packed) - 12) + packed[12:]
    packed = fix_crc(packed)
    assert core.validate_batches(packed)[0].compression == 4
    with pytest.raises(InvalidRecordError) as info:
        core.validate_batches(packed, decompress=True)
    assert info.value.field == field
    with pytest.raises(InvalidRecordError):
        core.decode_records(packed)


def test_lying_batch_length(impl, small_batch):
    for length in (0, 48, -1, -(2**31), 2**31 - 1, len(small_batch) - 11):
        damaged = bytearray(small_batch)
        struct.pack_into(">i", damaged, 8, length)
        with pytest.raises(CorruptBatchError) as info:
            impl.validate_batches(damaged)
        assert info.value.field in ("batch_length", "magic", "crc")


def test_huge_batch_length_is_only_incomplete_for_readers(small_batch):
    damaged = bytearray(small_batch)
    struct.pack_into(">i", damaged, 8, 2**31 - 1)
    assert core.scan_batches(damaged) == (0, 0)
    assert list(core.iter_records(damaged)) == []
    assert core.decode_records(damaged).bytes_consumed == 0


# --- compiled and reference agree on arbitrary damage -----------------------------------


def _outcome(impl, buf, **kw):
    try:
        hs = impl.validate_batches(buf, **kw)
    except CorruptBatchError as exc:
        return (type(exc).__name__, exc.field, exc.offset, exc.field_offset)
    return [tuple(getattr(h, f) for f in ("base_offset", "batch_length", "crc", "attributes",
                                         "records_count", "last_offset_delta")) for h in hs]


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_differential_damage(data, small_batch):
    base = bytearray(small_batch + core.build_batch([(b"x" * 20, None, 5, [("a", None)])] * 3))
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(base) - 1), st.integers(0, 255)),
                               min_size=1, max_size=4))
    for at, value in edits:
        base[at] = value
    cut = data.draw(st.integers(0, len(base)))
    buf = bytes(base[:cut])
    if data.draw(st.booleans()) and len(buf) >= 61:
        # recompute the first batch's CRC so the damage reaches the record walk
        length = struct.unpack_from(">i", buf, 8)[0]
        if 49 <= length and length + 12 <= len(buf):
            buf = fix_crc(buf[:length + 12]) + buf[length + 12:]
    client = data.draw(st.booleans())
    assert _outcome(core, buf, from_client=client) == _outcome(reference, buf, from_client=client)
    assert core.scan_batches(buf) == reference.scan_batches(buf) if _scan_ok(buf) else True


def _scan_ok(buf: bytes) -> bool:
    try:
        reference.scan_batches(buf)
    except CorruptBatchError:
        with pytest.raises(CorruptBatchError):
            core.scan_batches(buf)
        return False
    return True


@settings(max_examples=150, deadline=None)
@given(garbage=st.binary(max_size=200))
def test_random_bytes_never_crash(garbage):
    for fn in (core.validate_batches, core.decode_records, core.scan_batches, core.convert_legacy):
        try:
            fn(garbage)
        except CorruptBatchError:
            pass
    try:
        list(core.iter_records(garbage))
    except CorruptBatchError:
        pass
    if len(garbage) >= 61:
        # with a right CRC and length the bytes reach the record walk
        forged = bytearray(garbage)
        struct.pack_into(">ib", forged, 8, len(forged) - 12, 2)
        forged[16] = 2
        forged = fix_crc(forged)
        assert _outcome(core, forged) == _outcome(reference, forged)


# --- legacy message sets ----------------------------------------------------------------


def _legacy(magic: int, key: bytes | None, value: bytes | None, attributes: int = 0,
            timestamp: int = 5, offset: int = 0) -> bytes:
    import zlib

    body = bytes([magic, attributes]) + (struct.pack(">q", timestamp) if magic else b"")
    for b in (key, value):
        body += struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


def test_legacy_damage_is_rejected():
    msg = _legacy(1, b"k", b"v")
    assert core.is_legacy(msg)
    for bit in range(len(msg) * 8):
        if bit // 8 < 8:
            continue          # the offset is not checked (the broker renumbers it)
        damaged = bytearray(msg)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(CorruptBatchError):
            core.convert_legacy(damaged)
    for cut in range(1, len(msg)):
        with pytest.raises(CorruptBatchError):
            core.convert_legacy(msg[:cut])


@pytest.mark.parametrize("message, field", [
    (_legacy(0, b"k", b"v", attributes=4), "attributes"),            # zstd needs magic 2
    (_legacy(1, None, None, attributes=1), "value"),                  # wrapper without value
    (_legacy(1, None, bytes(cramjam.gzip.compress(_legacy(0, b"k", b"v"))), attributes=1), "magic"),
    (_legacy(1, None, bytes(cramjam.gzip.compress(_legacy(1, None, b"x", attributes=1))), attributes=1),
     "attributes"),
    (_legacy(1, None, bytes(cramjam.gzip.compress(_legacy(1, b"k", b"v")[:-1])), attributes=1),
     "message_size"),
    (_legacy(1, None, b"not gzip", attributes=1), "records"),
])
def test_legacy_hostile(message, field):
    with pytest.raises(CorruptBatchError) as info:
        core.convert_legacy(message)
    assert info.value.field == field


def test_legacy_lying_key_length():
    msg = bytearray(_legacy(1, b"key", b"v"))
    for length in (-2, 100, 2**31 - 1):
        struct.pack_into(">i", msg, 26, length)
        import zlib

        struct.pack_into(">I", msg, 12, zlib.crc32(bytes(msg[16:])))
        with pytest.raises(CorruptBatchError) as info:
            core.convert_legacy(msg)
        assert info.value.field == "key"


def test_legacy_wrappers_share_one_decompression_budget():
    import cramjam as cj

    inner = _legacy(1, None, b"\x00" * 300_000)
    wrapper = _legacy(1, None, bytes(cj.gzip.compress(inner)), attributes=1)
    assert len(wrapper) < 2_000
    assert len(core.convert_legacy(wrapper * 3, max_decompressed_size=1 << 20)) > 900_000
    from pykfk._core.errors import RecordTooLargeError

    with pytest.raises(RecordTooLargeError):
        core.convert_legacy(wrapper * 4, max_decompressed_size=1 << 20)
