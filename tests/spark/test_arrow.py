"""pykfk_spark.arrow: the Arrow batches readers hand to Spark hold exactly what the
record-by-record decoder (iter_records) sees, in exactly Spark's Arrow schema."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pykfk._core.records import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_ZSTD,
    build_batch,
    decode_records,
    iter_records,
)
from pykfk_spark.arrow import arrow_schema, to_record_batch

# Spark's Kafka source schema (KafkaRecordToRowConverter), headers last.
SPARK_KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)


@pytest.mark.parametrize("headers", [True, False])
def test_schema_is_sparks_arrow_schema(headers: bool) -> None:
    fields = SPARK_KAFKA_SCHEMA.fields if headers else SPARK_KAFKA_SCHEMA.fields[:-1]
    expected = to_arrow_schema(StructType(fields), timezone="UTC")
    assert arrow_schema(headers) == expected
    assert arrow_schema(headers).equals(expected, check_metadata=True)


def _random_records(rng: random.Random, n: int, t0: int) -> list[tuple]:
    out = []
    for i in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.randrange(0, 300))
        headers = [
            (f"h{j}-é", None if rng.random() < 0.3 else rng.randbytes(rng.randrange(0, 8)))
            for j in range(rng.choice([0, 0, 1, 3]))
        ]
        out.append((key, value, t0 + rng.randrange(-5, 1000), headers))
    return out


def _expected_rows(
    buf: bytes, topic: str, partition: int, start: int, end: int | None
) -> list[dict]:
    rows = []
    for r in iter_records(buf):
        if r.is_control or r.offset < start or (end is not None and r.offset >= end):
            continue
        rows.append(
            {
                "key": r.key,
                "value": r.value,
                "topic": topic,
                "partition": partition,
                "offset": r.offset,
                "timestamp": datetime.fromtimestamp(r.timestamp / 1000, timezone.utc),
                "timestampType": r.timestamp_type,
                "headers": [{"key": k, "value": v} for k, v in r.headers] or None,
            }
        )
    return rows


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_LZ4, CODEC_ZSTD])
def test_batches_match_record_decoder(codec: int) -> None:
    rng = random.Random(codec)
    buf = b""
    offset = 0
    for size in (1, 7, 120, 33):
        buf += build_batch(
            _random_records(rng, size, 1_700_000_000_000), base_offset=offset, compression=codec
        )
        offset += size
    # a control batch (transaction marker) in the middle is skipped, as consumers do
    buf += build_batch(
        [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", 0, None)],
        base_offset=offset,
        is_control=True,
        is_transactional=True,
        producer_id=1,
        producer_epoch=0,
    )
    offset += 1
    buf += build_batch(
        _random_records(rng, 50, 1_700_000_000_000), base_offset=offset, timestamp_type=1
    )
    total = offset + 50
    for start, end in [(0, None), (0, total), (5, 130), (8, 9), (161, total)]:
        decoded = decode_records(buf, start)
        batch = to_record_batch(decoded, "t", 4, end)
        assert batch.schema == arrow_schema(True)
        assert batch.to_pylist() == _expected_rows(buf, "t", 4, start, end)
        plain = to_record_batch(decoded, "t", 4, end, include_headers=False)
        assert plain.schema == arrow_schema(False)
        assert plain.to_pylist() == [
            {k: v for k, v in row.items() if k != "headers"}
            for row in _expected_rows(buf, "t", 4, start, end)
        ]


def test_empty_and_fully_cut_ranges() -> None:
    buf = build_batch([(b"k", b"v", 1, None)] * 3, base_offset=10)
    assert to_record_batch(decode_records(b""), "t", 0).num_rows == 0
    assert to_record_batch(decode_records(buf, 0), "t", 0, end_offset=10).num_rows == 0
    assert to_record_batch(decode_records(buf, 0), "t", 0, end_offset=12).column(
        "offset"
    ).to_pylist() == [10, 11]


def test_header_key_that_is_not_utf8_is_replaced() -> None:
    buf = build_batch([(b"k", b"v", 1, [(b"\xff\xfeok", b"x")])])
    row = to_record_batch(decode_records(buf), "t", 0).to_pylist()[0]
    assert row["headers"] == [{"key": "\ufffd\ufffdok", "value": b"x"}]


def test_large_values_keep_their_bytes() -> None:
    big = bytes(range(256)) * 4096  # 1 MiB
    buf = build_batch([(None, big, 5, None), (b"k", big[::-1], 6, None)])
    rows = to_record_batch(decode_records(buf), "t", 0).to_pylist()
    assert [r["value"] for r in rows] == [big, big[::-1]]
    assert isinstance(to_record_batch(decode_records(buf), "t", 0).column("value"), pa.BinaryArray)


def test_read_committed_drops_aborted_batches_and_markers() -> None:
    """KIP-98's consumer rule on one Fetch answer: producer 7 aborts a transaction
    (first offset 0), then commits another; producer 8 commits one in between; producer
    9's aborted transaction has its marker beyond this answer. Markers are never rows."""
    from types import SimpleNamespace

    from pykfk_spark.client import skipped_batches

    def data(base: int, n: int, pid: int = -1) -> bytes:
        rows = [(None, b"v%d" % (base + i), 1_000 + base + i, None) for i in range(n)]
        return build_batch(rows, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                           base_sequence=0 if pid >= 0 else -1, is_transactional=pid >= 0)

    def marker(base: int, pid: int, commit: bool) -> bytes:
        key = b"\x00\x00\x00" + (b"\x01" if commit else b"\x00")
        return build_batch([(key, b"\x00\x00\x00\x00\x00\x00", 1_000, None)], base_offset=base,
                           producer_id=pid, producer_epoch=0, is_transactional=True, is_control=True)

    log = b"".join([
        data(0, 3, 7), data(3, 2, 8), data(5, 2), marker(7, 7, commit=False), data(8, 2, 7),
        marker(10, 8, commit=True), marker(11, 7, commit=True), data(12, 2, 9), data(14, 1),
    ])
    aborted = [SimpleNamespace(producer_id=9, first_offset=12), SimpleNamespace(producer_id=7, first_offset=0)]
    # A broker lists the aborted transactions whose marker is at or after the fetch offset.
    for start, expected in [(0, [3, 4, 5, 6, 8, 9, 14]), (1, [3, 4, 5, 6, 8, 9, 14]), (8, [8, 9, 14])]:
        decoded = decode_records(log, start, include_control=True)
        listed = aborted if start <= 7 else aborted[:1]  # producer 7's abort marker is at 7
        batch = to_record_batch(decoded, "t", 0, 15, skipped_batches=skipped_batches(decoded, listed))
        assert batch.column("offset").to_pylist() == expected, start
        assert batch.column("value").to_pylist() == [b"v%d" % o for o in expected]
    # Nothing aborted in the answer: only the markers go.
    decoded = decode_records(log, 0, include_control=True)
    kept = to_record_batch(decoded, "t", 0, skipped_batches=skipped_batches(decoded, []))
    assert kept.column("offset").to_pylist() == [0, 1, 2, 3, 4, 5, 6, 8, 9, 12, 13, 14]
    # read_uncommitted: markers skipped by the decoder, every data record kept.
    assert to_record_batch(decode_records(log, 0), "t", 0).num_rows == 12
