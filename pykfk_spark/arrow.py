"""Decoded records (pykfk._core.records.DecodedRecords) to pyarrow RecordBatches in the row
shape of Spark's Kafka source, built column-wise: no Python object per record.

DecodedRecords keeps every key, value and header byte in one ``data`` blob, appended in
record order (record i: key, value, then each header's key and value; a null span adds
no bytes), with (start, length) spans per field. Arrow binary arrays need each column's
bytes contiguous, so the blob is first viewed as a "segment" array whose element
boundaries are the span edges, then the wanted segments are gathered with ``take`` (one
C copy per column):

    record segments   3 per record: [key][value][headers of that record]
    header segments   3 per header: [header key][header value][gap up to the next header]

Null keys, values and header values become nulls through null indices in ``take``.

Batches a read_committed reader skips (markers, aborted transactions) come as one flag
per batch; the flags are spread to the records through ``batch_index`` with ``take`` and
the rows dropped with one ``filter``, only when some batch is skipped.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])

# Spark's Arrow form of the Kafka source schema (pyspark.sql.pandas.types.to_arrow_schema
# with timezone "UTC"): every field nullable, binary not large_binary, microsecond UTC
# timestamps, list items named "element". A RecordBatch must match it exactly.
KAFKA_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(pa.field("element", HEADER_TYPE))),
    ]
)
KAFKA_ARROW_SCHEMA_NO_HEADERS = pa.schema(list(KAFKA_ARROW_SCHEMA)[:-1])

KAFKA_SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>"
)
KAFKA_SCHEMA_DDL_NO_HEADERS = KAFKA_SCHEMA_DDL.rsplit(", headers", 1)[0]


def arrow_schema(include_headers: bool = True) -> pa.Schema:
    return KAFKA_ARROW_SCHEMA if include_headers else KAFKA_ARROW_SCHEMA_NO_HEADERS


def _int_array(values: array, arrow_type: pa.DataType) -> pa.Array:
    """Zero-copy Arrow view of an array.array ('q' -> int64, 'i' -> int32)."""
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def _as_array(column: pa.Array, typecode: str) -> array:
    """An array.array copy of an int Arrow column (for strided interleaving)."""
    width = column.type.bit_width // 8
    out = array(typecode)
    out.frombytes(
        column.buffers()[1][column.offset * width : (column.offset + len(column)) * width]
    )
    return out


def _segments(edges: list[pa.Array], end: int, data: pa.Buffer) -> pa.Array:
    """A binary array over ``data`` whose element k*len(edges)+j spans edges[j][k] ..
    the next edge (the edge lists interleaved; ``end`` closes the last element)."""
    width = len(edges)
    n = len(edges[0])
    total = width * n
    offsets = array("i", bytes(4 * (total + 1)))
    for j, column in enumerate(edges):
        offsets[j:total:width] = _as_array(pc.cast(column, pa.int32()), "i")
    offsets[total] = end
    return pa.Array.from_buffers(pa.binary(), total, [None, pa.py_buffer(offsets), data])


def _strided(count: int, start: int, step: int) -> pa.Array:
    """int32 [start, start+step, ...] of ``count`` elements, computed in C."""
    if count == 0:
        return pa.array([], pa.int32())
    ones = pa.repeat(pa.scalar(step, pa.int32()), count)
    return pc.add(pc.subtract(pc.cumulative_sum(ones), step), start)


def _null_where_negative(indices: pa.Array, lengths: pa.Array) -> pa.Array:
    """``indices`` with nulls where ``lengths`` is -1 (a null key or value)."""
    if len(lengths) == 0 or pc.min(lengths).as_py() >= 0:
        return indices
    return pc.if_else(pc.less(lengths, 0), pa.scalar(None, pa.int32()), indices)


def _clamped(lengths: pa.Array) -> pa.Array:
    """Bytes a span occupies in the blob: its length, or 0 for null (-1)."""
    return pc.cast(pc.max_element_wise(lengths, 0), pa.int64())


def _headers_column(decoded: Any, data: pa.Buffer, n: int) -> pa.Array:
    m = len(decoded.header_key_starts)
    index = pc.cast(_int_array(decoded.header_index, pa.int64()), pa.int32())
    counts = pc.subtract(index[1:], index[:-1])
    no_headers = pc.equal(counts, 0)
    if m == 0:
        entries = pa.array([], HEADER_TYPE)
    else:
        key_starts = _int_array(decoded.header_key_starts, pa.int64())
        key_lengths = _int_array(decoded.header_key_lengths, pa.int32())
        value_lengths = _int_array(decoded.header_value_lengths, pa.int32())
        key_ends = pc.add(key_starts, pc.cast(key_lengths, pa.int64()))
        value_ends = pc.add(key_ends, _clamped(value_lengths))
        segments = _segments([key_starts, key_ends, value_ends], len(decoded.data), data)
        keys = segments.take(_strided(m, 0, 3))
        try:
            names = keys.cast(pa.string())
        except pa.ArrowInvalid:  # header keys are Java Strings: undecodable bytes replaced
            names = pa.array([k.decode("utf-8", "replace") for k in keys.to_pylist()], pa.string())
        values = segments.take(_null_where_negative(_strided(m, 1, 3), value_lengths))
        entries = pa.StructArray.from_arrays([names, values], fields=list(HEADER_TYPE))
    # Spark's Kafka source gives null, not an empty array, to a record without headers.
    return pa.ListArray.from_arrays(
        index, entries, type=KAFKA_ARROW_SCHEMA.field("headers").type, mask=no_headers
    )


def to_record_batch(
    decoded: Any,
    topic: str,
    partition: int,
    end_offset: int | None = None,
    *,
    include_headers: bool = True,
    skipped_batches: array | None = None,
) -> pa.RecordBatch:
    """The records of ``decoded`` with offset < ``end_offset`` (all when None) as one
    RecordBatch of ``arrow_schema(include_headers)``, leaving out the records of the
    batches flagged 1 in ``skipped_batches`` (one int8 flag per batch of ``decoded``)."""
    schema = arrow_schema(include_headers)
    n = len(decoded)
    keep = n if end_offset is None else bisect_left(decoded.offsets, end_offset)
    if keep == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
    data = pa.py_buffer(decoded.data)
    key_lengths = _int_array(decoded.key_lengths, pa.int32())
    value_lengths = _int_array(decoded.value_lengths, pa.int32())
    key_bytes = _clamped(key_lengths)
    value_bytes = _clamped(value_lengths)
    record_bytes = pc.add(key_bytes, value_bytes)
    if len(decoded.header_key_starts):
        header_bytes = pc.add(
            _clamped(_int_array(decoded.header_key_lengths, pa.int32())),
            _clamped(_int_array(decoded.header_value_lengths, pa.int32())),
        )
        cumulative = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(header_bytes)])
        per_record = cumulative.take(_int_array(decoded.header_index, pa.int64()))
        record_bytes = pc.add(record_bytes, pc.subtract(per_record[1:], per_record[:-1]))
    record_starts = pc.subtract(pc.cumulative_sum(record_bytes), record_bytes)
    key_ends = pc.add(record_starts, key_bytes)
    segments = _segments(
        [record_starts, key_ends, pc.add(key_ends, value_bytes)], len(decoded.data), data
    )
    keys = segments.take(_null_where_negative(_strided(n, 0, 3), key_lengths))
    values = segments.take(_null_where_negative(_strided(n, 1, 3), value_lengths))

    batch_types = pa.array([b.timestamp_type for b in decoded.batches], pa.int32())
    timestamp_types = batch_types.take(_int_array(decoded.batch_index, pa.int32()))
    millis = _int_array(decoded.timestamps, pa.int64())
    timestamps = pc.multiply(millis, 1000).view(pa.timestamp("us", tz="UTC"))
    columns = [
        keys,
        values,
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _int_array(decoded.offsets, pa.int64()),
        timestamps,
        timestamp_types,
    ]
    if include_headers:
        columns.append(_headers_column(decoded, data, n))
    batch = pa.RecordBatch.from_arrays(columns, schema=schema)
    if keep < n:
        batch = batch.slice(0, keep)
    if skipped_batches is not None:
        batch = batch.filter(_kept_records(skipped_batches, decoded.batch_index, keep))
    return batch


def _kept_records(skipped_batches: array, batch_index: array, count: int) -> pa.Array:
    """True for each of the first ``count`` records whose batch is not skipped."""
    flags = pa.Array.from_buffers(
        pa.int8(), len(skipped_batches), [None, pa.py_buffer(skipped_batches)]
    )
    per_record = flags.take(_int_array(batch_index, pa.int32()).slice(0, count))
    return pc.equal(per_record, 0)
