"""Batches written by real Kafka clients, and pykfk's batches read by them.

- kafka-python's DefaultRecordBatchBuilder / MemoryRecordsBuilder / LegacyRecordBatchBuilder
  (its snappy, lz4 and zstd encoders need python-snappy, lz4 and zstandard; where those are
  not installed, aiokafka's cramjam-based encoders stand in: kafka-python still frames the
  batch, aiokafka compresses it);
- aiokafka's compiled DefaultRecordBatchBuilder;
- librdkafka (confluent-kafka): golden Produce payloads in tests/core/golden, captured by
  tools/capture_librdkafka_batches.py (run it again to regenerate them).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from _records_helpers import CODEC_NAMES, CODECS, lz4_with_old_kafka_checksum

from pykfk._core import records as core
from pykfk._reference import records as reference

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"


def _load_capture_tool():
    spec = importlib.util.spec_from_file_location(
        "capture_librdkafka_batches", ROOT / "tools" / "capture_librdkafka_batches.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


capture_tool = _load_capture_tool()


@pytest.fixture
def kafka_python_codecs(monkeypatch):
    """kafka-python with every codec available (aiokafka's encoders where its own
    libraries are missing)."""
    import aiokafka.codec as aio
    import kafka.codec as kc
    import kafka.record.default_records as kd
    import kafka.record.legacy_records as kl

    for name in ("snappy", "lz4", "zstd"):
        if getattr(kc, f"has_{name}")():
            continue
        monkeypatch.setattr(kc, f"has_{name}", lambda: True)
        for module in (kd, kl):
            for suffix in ("encode", "decode"):
                attr = f"{name}_{suffix}"
                if hasattr(module, attr):
                    monkeypatch.setattr(module, attr, getattr(aio, attr))
    if getattr(kc, "xxhash", None) is None:
        # magic 0 LZ4 carries Kafka 0.8's wrong frame header checksum
        monkeypatch.setattr(kl, "lz4_encode_old_kafka",
                            lambda data: lz4_with_old_kafka_checksum(aio.lz4_encode(data)))


def client_records(n: int = 10, headers: bool = True):
    """Compressible records (kafka-python sends uncompressed when compression does not help)."""
    out = []
    for i in range(n):
        key = None if i == 2 else b"key-%d" % i
        value = None if i == 4 else b"payload %d " % i * 20
        hdrs = [("trace", b"t-%d" % i), ("empty", None)][: i % 3] if headers else []
        out.append((key, value, 1_700_000_000_000 + i, hdrs))
    return out


def as_tuples(records, with_headers: bool = True):
    return [(r.key, r.value, r.timestamp, [tuple(h) for h in r.headers] if with_headers else [])
            for r in records]


def expect(records):
    return [(k, v, ts, [tuple(h) for h in hs]) for k, v, ts, hs in records]


def check_v2(buf: bytes, records, codec: int) -> None:
    hs = core.validate_batches(buf, from_client=True, decompress=True)
    assert {h.compression for h in hs} == {codec}
    assert sum(h.records_count for h in hs) == len(records)
    assert as_tuples(core.iter_records(buf)) == expect(records)
    assert as_tuples(core.decode_records(buf)) == expect(records)
    assert as_tuples(reference.iter_records(buf)) == expect(records)
    writable = bytearray(buf)
    assert core.assign_offsets(writable, 500, 3) == 500 + len(records)
    assert [r.offset for r in core.iter_records(writable)] == list(range(500, 500 + len(records)))
    assert [h.crc for h in core.validate_batches(writable)] == [h.crc for h in hs]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES)
def test_kafka_python_default_record_batch_builder(kafka_python_codecs, codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    records = client_records()
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, (key, value, ts, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    check_v2(bytes(builder.build()), records, codec)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES)
def test_kafka_python_memory_records_builder(kafka_python_codecs, codec):
    from kafka.record.memory_records import MemoryRecordsBuilder

    records = client_records(12)
    payload = b""
    for part in (records[:5], records[5:]):   # two batches back to back, as in a Produce
        builder = MemoryRecordsBuilder(magic=2, compression_type=codec, batch_size=1 << 20,
                                       producer_id=77, producer_epoch=1, base_sequence=len(payload))
        for key, value, ts, headers in part:
            builder.append(timestamp=ts, key=key, value=value, headers=headers)
        builder.close()
        payload += bytes(builder.buffer())
    check_v2(payload, records, codec)
    assert [h.producer_id for h in core.validate_batches(payload)] == [77, 77]


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES)
def test_aiokafka_builder(codec):
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    records = client_records()
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, 0, 1 << 20)
    for i, (key, value, ts, headers) in enumerate(records):
        builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
    buf = bytes(builder.build())
    check_v2(buf, records, codec)


def golden_payloads(name: str) -> list[bytes]:
    lines = (GOLDEN / f"librdkafka_{name}.hex").read_text().splitlines()
    return [bytes.fromhex(line) for line in lines if line and not line.startswith("#")]


@pytest.mark.parametrize("codec", CODEC_NAMES)
def test_librdkafka_golden_batches(codec):
    (payload,) = golden_payloads(codec)
    expected = capture_tool.golden_messages()
    check_v2(payload, expected, CODEC_NAMES.index(codec))


@pytest.mark.parametrize("codec", capture_tool.LEGACY_CODECS)
def test_librdkafka_golden_legacy_message_sets(codec):
    (payload,) = golden_payloads(f"legacy_{codec}")
    assert core.is_legacy(payload)
    converted = core.convert_legacy(payload)
    assert isinstance(converted, bytearray)
    check_v2(bytes(converted), capture_tool.golden_messages(legacy=True), 0)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3], ids=CODEC_NAMES[:4])
def test_kafka_python_legacy_builder(kafka_python_codecs, magic, codec):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    records = client_records(8, headers=False)
    sets = []
    for part in (records[:3], records[3:]):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
        for i, (key, value, ts, _) in enumerate(part):
            builder.append(i, timestamp=ts, key=key, value=value)
        sets.append(bytes(builder.build()))
    uncompressed = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
    uncompressed.append(0, timestamp=records[0][2], key=b"plain", value=b"tail")
    payload = sets[0] + sets[1] + bytes(uncompressed.build())
    if codec:
        assert payload[17] & 7 == codec
    assert core.is_legacy(payload)
    converted = core.convert_legacy(payload)
    want = expect(records + [(b"plain", b"tail", records[0][2], [])])
    if magic == 0:   # magic 0 has no timestamps: NO_TIMESTAMP after up-conversion
        want = [(k, v, -1, h) for k, v, _, h in want]
    check_v2(bytes(converted), [(k, v, ts, h) for k, v, ts, h in want], 0)


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES)
def test_pykfk_batches_read_by_kafka_python(kafka_python_codecs, codec):
    from kafka.record.memory_records import MemoryRecords

    records = client_records()
    buf = bytearray(core.build_batch(records[:6], compression=codec)
                    + core.build_batch(records[6:], compression=codec))
    core.assign_offsets(buf, 40)
    reader = MemoryRecords(bytes(buf))
    got = []
    while reader.has_next():
        batch = reader.next_batch()
        assert batch.validate_crc() and batch.compression_type == codec
        got += [(r.offset, r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]) for r in batch]
    assert got == [(40 + i, k, v, ts, [tuple(h) for h in hs]) for i, (k, v, ts, hs) in enumerate(records)]


@pytest.mark.parametrize("magic", [0, 1])
def test_to_legacy_read_by_kafka_python(magic):
    from kafka.record.memory_records import MemoryRecords

    records = client_records(9)
    buf = bytearray(core.build_batch(records[:4], compression=1)
                    + core.build_batch(records[4:7])
                    + core.build_batch([(b"m", b"c", 5, [])], is_control=True, is_transactional=True,
                                       producer_id=1, producer_epoch=0)
                    + core.build_batch(records[7:], compression=4))
    core.assign_offsets(buf, 1_000)
    log_append = bytearray(core.build_batch(records[7:]))
    core.assign_offsets(log_append, 1_010)
    core.set_log_append_time(log_append, 42)
    legacy = core.to_legacy(bytes(buf + log_append) + bytes(buf[:40]), magic)  # partial tail dropped
    reader = MemoryRecords(legacy)
    got = []
    while reader.has_next():
        batch = reader.next_batch()
        assert batch.validate_crc() and batch.magic == magic
        for r in batch:
            got.append((r.offset, r.key, r.value, r.timestamp if magic else None,
                        r.timestamp_type if magic else None))
    offsets = [1_000 + i for i in range(7)] + [1_008, 1_009, 1_010, 1_011]   # control batch skipped
    rows = records + records[7:]
    want = [(o, k, v, (42 if o >= 1_010 else ts) if magic else None,
             (1 if o >= 1_010 else 0) if magic else None)
            for o, (k, v, ts, _) in zip(offsets, rows)]
    assert got == want
    back = core.iter_records(core.convert_legacy(legacy))
    assert [(r.key, r.value) for r in back] == [(k, v) for k, v, *_ in rows]
