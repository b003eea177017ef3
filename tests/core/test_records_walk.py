"""The record walk's fast path (batch.c record_fast) against the careful parser.

The fast path only reads when a record lies at least a few bytes before the end of readable
memory, so a batch validated alone sends its last record down the careful path. These
tests put hostile records where the fast path sees them: in the middle of a batch, and in
a batch followed by more bytes. Verdicts (error class, field, offsets) must be exactly those
of the pure-Python reference, which knows nothing of fast paths."""

from __future__ import annotations

import ctypes
import mmap
import random
import struct

import cramjam
import pytest
from _records_helpers import fix_crc, make_batch, record_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pykfk._core import records as core
from pykfk._core.errors import CorruptBatchError
from pykfk._reference import records as reference

V = reference.write_varint
TRAILER = core.build_batch([(b"t", b"trailer", 5, [])])   # readable bytes after a batch


def _outcome(impl, buf, **kw):
    try:
        hs = impl.validate_batches(buf, **kw)
    except CorruptBatchError as exc:
        return (type(exc).__name__, exc.field, exc.offset, exc.field_offset)
    return [(h.batch_length, h.records_count, h.last_offset_delta) for h in hs]


def _good(i: int, value_size: int = 170, timestamp_delta: int | None = None) -> bytes:
    ts = i if timestamp_delta is None else timestamp_delta
    return record_bytes(i, b"key-%08d" % i, b"v" * value_size, [(b"trace", b"%08x" % i)], ts)


def _body(*parts: bytes) -> bytes:
    body = b"".join(parts)
    return V(len(body)) + body


# Records broken in one way each; `i` is the offset_delta a well-formed record would carry.
BROKEN = {
    "record length past the batch": lambda i: V(5000) + b"\x00" * 8,
    "zero record length": lambda i: V(0),
    "negative record length": lambda i: V(-3) + b"\x00" * 8,
    "3-byte record length too long": lambda i: b"\xff\xff\x7f",
    "key past the record": lambda i: _body(b"\x00", V(0), V(i), V(50), b"k"),
    "key length -2": lambda i: _body(b"\x00", V(0), V(i), V(-2), V(-1), V(0)),
    "value past the record": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(300), b"v" * 10, V(0)),
    "value length -5": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(-5), V(0)),
    "negative header count": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(-1), V(-1)),
    "huge header count": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(-1), V(2**30)),
    "null header key": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(-1), V(1), V(-1), V(-1)),
    "header value past the record": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(-1), V(1), V(1), b"h", V(40)),
    "fields shorter than the length": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(-1), V(0), b"zz"),
    "fields longer than the length": lambda i: V(4) + b"\x00" + V(0) + V(i) + V(-1) + V(-1) + V(0),
    "offset_delta repeated": lambda i: _body(b"\x00", V(0), V(i - 1), V(-1), V(-1), V(0)),
    "offset_delta skips": lambda i: _body(b"\x00", V(0), V(i + 1), V(-1), V(-1), V(0)),
    "offset_delta negative": lambda i: _body(b"\x00", V(0), V(-1), V(-1), V(-1), V(0)),
    "5-byte timestamp varint ending past the record": lambda i: _body(b"\x00", b"\xff\xff"),
    "2-byte varint split by the record end": lambda i: V(2) + b"\x00\x80",
}


@pytest.mark.parametrize("name", sorted(BROKEN))
@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("trailer", [False, True], ids=["alone", "followed"])
@pytest.mark.parametrize("client", [False, True], ids=["replica", "client"])
def test_broken_record_anywhere(name, where, trailer, client):
    count = 40
    at = {"first": 0, "middle": count // 2, "last": count - 1}[where]
    area = b"".join(BROKEN[name](i) if i == at else _good(i) for i in range(count))
    buf = make_batch(area, records_count=count, last_offset_delta=count - 1) + (TRAILER if trailer else b"")
    got = _outcome(core, buf, from_client=client)
    assert got == _outcome(reference, buf, from_client=client)
    assert isinstance(got, tuple), "a broken record was accepted"


@pytest.mark.parametrize("trailer", [False, True], ids=["alone", "followed"])
def test_well_formed_shapes(trailer):
    """Varints of every width the fast path handles and some it hands on: all accepted."""
    shapes = [
        _good(0, 0), _good(1, 1), _good(2, 62), _good(3, 63), _good(4, 64), _good(5, 8191),
        _good(6, 8192), _good(7, 70_000),                     # 2- and 3-byte lengths
        _good(8, 10, timestamp_delta=-1), _good(9, 10, timestamp_delta=4095),
        _good(10, 10, timestamp_delta=4096), _good(11, 10, timestamp_delta=-(2**40)),
        record_bytes(12, None, None), record_bytes(13, b"", b""),
        record_bytes(14, b"k", b"v", [(b"a", None), (b"b", b""), (b"c" * 200, b"d" * 9000)]),
        record_bytes(15, b"k", b"v", [(b"h%d" % j, b"x") for j in range(70)]),
    ]
    area = b"".join(shapes)
    buf = make_batch(area, records_count=len(shapes), last_offset_delta=len(shapes) - 1)
    buf += TRAILER if trailer else b""
    for client in (False, True):
        assert _outcome(core, buf, from_client=client) == _outcome(reference, buf, from_client=client)
        assert core.validate_batches(buf, from_client=client)[0].records_count == len(shapes)


def test_non_canonical_two_byte_varint_accepted_as_before():
    """0x80 0x00 is a 2-byte zero: the careful parser takes it, so the fast path must too."""
    rec = _body(b"\x00", b"\x80\x00", V(0), V(-1), V(-1), V(0))
    buf = make_batch(rec + _good(1), records_count=2, last_offset_delta=1) + TRAILER
    assert _outcome(core, buf) == _outcome(reference, buf)
    assert len(core.validate_batches(buf)) == 2


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_differential_record_damage(data):
    """Random edits inside the records of a many-record batch, CRC fixed so the walk decides,
    with and without bytes after the batch: compiled and reference agree."""
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    count = data.draw(st.integers(1, 12))
    area = bytearray(b"".join(
        record_bytes(i, rng.randbytes(rng.choice((0, 3, 12, 70))) if rng.random() > 0.2 else None,
                     rng.randbytes(rng.choice((0, 5, 63, 64, 200))),
                     [(b"h", rng.randbytes(rng.choice((0, 8))))] * rng.choice((0, 1, 2)),
                     rng.choice((0, i, 63, 64, 5000)))
        for i in range(count)))
    edits = data.draw(st.lists(st.tuples(st.integers(0, len(area) - 1), st.integers(0, 255)),
                               min_size=1, max_size=3))
    for at, value in edits:
        area[at] = value
    buf = make_batch(bytes(area), records_count=count, last_offset_delta=count - 1)
    tail = data.draw(st.sampled_from([b"", TRAILER, b"\x00" * 3, b"\xff" * 20]))
    buf = fix_crc(buf) + tail
    client = data.draw(st.booleans())
    assert _outcome(core, buf, from_client=client) == _outcome(reference, buf, from_client=client)


def test_batch_header_rules_still_come_after_the_crc():
    """A batch whose CRC and header are both wrong is named by its CRC."""
    area = b"".join(_good(i) for i in range(10))
    bad = bytearray(make_batch(area, records_count=10, last_offset_delta=3) + TRAILER)
    bad[100] ^= 1
    assert _outcome(core, bytes(bad))[1] == "crc"
    struct.pack_into(">i", bad, 23, 9)   # last_offset_delta right again, CRC still wrong
    assert _outcome(core, bytes(bad))[1] == "crc"


# --- reads stay inside the buffer ---------------------------------------------------------

PAGE = mmap.PAGESIZE


@pytest.fixture(scope="module")
def guarded():
    """A writable page followed by an inaccessible one: a read past the buffer's end faults."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    region = mmap.mmap(-1, 4 * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    if libc.mprotect(base + 3 * PAGE, PAGE, 0) != 0:   # PROT_NONE
        pytest.skip("mprotect unavailable")
    yield region


def _at_guard(region: mmap.mmap, data: bytes) -> memoryview:
    """data placed so that its last byte is the last readable one."""
    start = 3 * PAGE - len(data)
    region[start:3 * PAGE] = data
    return memoryview(region)[start:3 * PAGE]


BIG_SPANS = {
    "key of 8000 in a short record": lambda i: _body(b"\x00", V(0), V(i), V(8000), b"k" * 10, V(-1), V(0)),
    "value of 8191 in a short record": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(8191), b"v" * 10, V(0)),
    "header value of 8000": lambda i: _body(b"\x00", V(0), V(i), V(-1), V(-1), V(1), V(1), b"h", V(8000), b"x"),
    "record length of 8191": lambda i: V(8191) + b"\x00" * 20,
}


@pytest.mark.parametrize("name", sorted(BROKEN) + sorted(BIG_SPANS))
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_no_read_past_the_buffer(guarded, name, where):
    make = BROKEN.get(name) or BIG_SPANS[name]
    count = 8
    at = {"first": 0, "middle": count // 2, "last": count - 1}[where]
    area = b"".join(make(i) if i == at else _good(i, 40) for i in range(count))
    batch = make_batch(area, records_count=count, last_offset_delta=count - 1)
    for data in (batch, batch + TRAILER[:30], TRAILER + batch):
        view = _at_guard(guarded, data)
        got = _outcome(core, view, from_client=True)
        assert got == _outcome(reference, bytes(data), from_client=True)
        view.release()


# --- validate_batches works through the buffer in trips of up to 64 batches ---------------


def _small_batches(n: int) -> list[bytes]:
    return [core.build_batch([(b"k%d" % i, b"v" * (i % 50), 1_000 + i, [])]) for i in range(n)]


@pytest.mark.parametrize("bad_at", [0, 63, 64, 65, 130, 199])
def test_error_position_across_trips(bad_at):
    batches = _small_batches(200)
    broken = bytearray(batches[bad_at])
    broken[-1] ^= 0xFF
    batches[bad_at] = bytes(broken)
    buf = b"".join(batches)
    got = _outcome(core, buf)
    assert got == _outcome(reference, buf)
    assert got[:3] == ("CorruptBatchError", "crc", sum(map(len, batches[:bad_at])))


def test_every_header_across_trips():
    batches = _small_batches(200)
    hs = core.validate_batches(b"".join(batches), from_client=True)
    assert [h.size for h in hs] == [len(b) for b in batches]
    assert [h.base_timestamp for h in hs] == [1_000 + i for i in range(200)]


def test_compressed_records_checked_before_later_batches():
    """decompress=True: a bad compressed batch is named even when a later batch is bad too."""
    inner = record_bytes(0, b"a", b"b") + record_bytes(0, b"c", b"d")   # offset_delta repeats
    packed = make_batch(bytes(cramjam.zstd.compress(inner)), records_count=2, last_offset_delta=1,
                        attributes=4)
    good = _small_batches(70)
    bad_crc = bytearray(good[-1])
    bad_crc[-1] ^= 1
    buf = b"".join(good[:69]) + packed + bytes(bad_crc)
    with pytest.raises(CorruptBatchError) as info:
        core.validate_batches(buf, decompress=True)
    assert (info.value.field, info.value.offset) == ("record.offset_delta", sum(map(len, good[:69])))
    with pytest.raises(CorruptBatchError) as info:
        core.validate_batches(buf)
    assert info.value.field == "crc"
