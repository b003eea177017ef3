"""What a leader checks produced batches against beyond what the compiled core validates
(Kafka's LogValidator; ``Log.append`` is the one caller): the rules for data straight
from a client, the CreateTime window of KIP-937, keys on compacted topics and the topic's
``compression.type``.

Client data (``Log.append(..., from_client=True)``, the Produce path): null or empty
record data is INVALID_RECORD; a legacy magic 0/1 message set is INVALID_RECORD where the
request version requires magic 2 (Produce v3+) and is converted to a v2 batch otherwise;
control batches (transaction markers, which only the broker writes) and batches with a
producer id but no base sequence (only a coordinator writes those) are INVALID_RECORD.
The batch checks read the headers the core's validating pass returns: one look a batch.

Record errors (KIP-467): a rule broken by single records (a keyless record on a
compacted topic, a CreateTime outside the window) fails the batch with
``InvalidRecords``, which names every offending record by its index in its batch and
gives one summary message; Produce v8+ sends both to the client.

Timestamps: with ``message.timestamp.before.max.ms`` / ``after.max.ms`` (or the deprecated
``difference.max.ms``) set, a record whose CreateTime lies outside the window around the
broker's clock fails its batch with INVALID_TIMESTAMP, as in Kafka. Topics without a
window (the default) skip the check.

Compression, as Kafka's LogValidator does it: a produced batch whose codec differs from the topic's is rebuilt with the topic's codec
(and its KIP-390 level); ``producer`` keeps every batch as it was sent.

Off the normal path: ``Log.append`` calls this only when some batch's codec differs, so a
topic whose producers already use its codec (or ``compression.type=producer``, the
default) pays one comparison per batch header. A rebuilt batch keeps everything but its
codec: offsets and their gaps, timestamps and their type, producer id, epoch and base
sequence, the transactional flag, the partition leader epoch, headers. Control batches
are never compressed and stay as they are.
"""

from __future__ import annotations

import struct
from typing import Any

import cramjam

from pykfk._core import records as core_records
from pykfk._core.crc import crc32c
from pykfk.errors import ErrorCode, KafkaError

_OFFSETS = core_records.BATCH_FIELD_OFFSETS
# The low byte of the big-endian int16 attributes, and the producer id and epoch.
_ATTRIBUTES_LOW = _OFFSETS["attributes"] + 1
_ATTR_CONTROL = core_records.ATTR_CONTROL
_PRODUCER = struct.Struct(">qh")
_HEADER_SIZE = core_records.BATCH_HEADER_SIZE
_GZIP, _SNAPPY, _LZ4, _ZSTD = 1, 2, 3, 4
# The levels pykfk._core.records.build_batch compresses with (Kafka's defaults, KIP-390):
# a batch at these levels is built by the core in one step.
_CORE_LEVELS = {_GZIP: None, _LZ4: 9, _ZSTD: 3}
# The magic byte of both legacy formats and of v2 batches sits at byte 16.
_MAGIC_AT = 16
CONTROL_REFUSED = "clients may not write control batches (transaction markers)"
# Record errors listed in a summary message (all of them go into record_errors).
_SUMMARY_ERRORS = 3


class InvalidRecords(KafkaError):
    """Records of a batch that break a rule (KIP-467): ``record_errors`` holds
    ``(batch_index, message)`` for each, the index counting from 0 in its batch; the
    batch is refused whole with ``code`` (INVALID_RECORD or INVALID_TIMESTAMP)."""

    def __init__(self, code: ErrorCode, record_errors: list[tuple[int, str]]):
        shown = "; ".join(f"record {index}: {message}" for index, message in record_errors[:_SUMMARY_ERRORS])
        more = len(record_errors) - _SUMMARY_ERRORS
        super().__init__(code, f"{len(record_errors)} invalid record(s) refused the batch: {shown}"
                               + (f" (and {more} more)" if more > 0 else ""))
        self.record_errors = record_errors


def client_records(records: Any, magic2_only: bool) -> memoryview:
    """A client's record data as ``Log.append`` validates it: INVALID_RECORD for none at
    all, or for a legacy message set where ``magic2_only`` (Produce v3+: Kafka's
    ProduceRequest.validateRecords); a legacy set is converted to a v2 batch otherwise,
    and read-only data copied (offsets are written in place). CORRUPT_MESSAGE for v3+
    data too short to hold a batch header's magic byte."""
    if type(records) is memoryview and len(records) > _MAGIC_AT and records[_MAGIC_AT] >= 2 \
            and not records.readonly:
        return records  # the common case: magic-2 batches in the request frame
    if records is None or len(records) == 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "empty record data")
    buf = records if type(records) is memoryview else memoryview(records)
    if len(buf) > _MAGIC_AT and buf[_MAGIC_AT] < 2:
        if magic2_only:
            raise KafkaError(ErrorCode.INVALID_RECORD, "Produce v3+ requires magic 2 record batches")
        return memoryview(core_records.convert_legacy(buf))
    if magic2_only and len(buf) < 17:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record data is shorter than a batch header")
    if buf.readonly:
        return memoryview(bytearray(buf))
    return buf


def check_client_batches(headers: list[Any]) -> None:
    """INVALID_RECORD for a control batch or a producer batch without a base sequence
    among a client's batches (``headers`` as the core validated them)."""
    for header in headers:
        attributes = header.attributes
        if attributes & _ATTR_CONTROL:
            raise KafkaError(ErrorCode.INVALID_RECORD, CONTROL_REFUSED)
        if header.base_sequence < 0 and header.producer_id >= 0:
            raise KafkaError(ErrorCode.INVALID_RECORD, "a batch with a producer id needs a base sequence")


def transactional_producer(records: Any) -> tuple[int, int] | None:
    """``(producer_id, producer_epoch)`` of a transactional batch at the start of
    ``records`` (a client's data before validation), else None."""
    if records is None or len(records) < _HEADER_SIZE or records[_MAGIC_AT] != 2 \
            or not records[_ATTRIBUTES_LOW] & core_records.ATTR_TRANSACTIONAL:
        return None
    producer_id, producer_epoch = _PRODUCER.unpack_from(records, _OFFSETS["producer_id"])
    return producer_id, producer_epoch


def check_timestamps(buf: memoryview, headers: list[Any], window: tuple[int, int], now_ms: int) -> None:
    """INVALID_TIMESTAMP (``InvalidRecords``, every such record named) when a record's
    CreateTime lies outside [now - before, now + after]. Every record is read (a negative
    timestamp delta can put one below its batch's base timestamp, which the header would
    not show); only topics with a window pay for it."""
    before, after = window
    low, high = now_ms - before, now_ms + after
    decoded = core_records.decode_records(buf)
    stamps = decoded.timestamps
    if not stamps or (low <= min(stamps) and max(stamps) <= high):
        return
    errors = []
    for i, stamp in enumerate(stamps):
        if stamp < low:
            message = (f"timestamp {stamp} is more than {before} ms before the broker's time {now_ms} "
                       f"(message.timestamp.before.max.ms)")
        elif stamp > high:
            message = (f"timestamp {stamp} is more than {after} ms after the broker's time {now_ms} "
                       f"(message.timestamp.after.max.ms)")
        else:
            continue
        errors.append((_index_in_batch(decoded, i), message))
    raise InvalidRecords(ErrorCode.INVALID_TIMESTAMP, errors)


def check_keys(buf: memoryview) -> None:
    """Kafka's rule for compacted topics: every record needs a key (the cleaner keeps
    records by key). INVALID_RECORD (``InvalidRecords``) naming every keyless record.
    Costs a decode of the records (compressed ones decompressed), on compacted topics only."""
    decoded = core_records.decode_records(buf)
    key_lengths = decoded.key_lengths
    if -1 not in key_lengths:
        return
    raise InvalidRecords(ErrorCode.INVALID_RECORD, [
        (_index_in_batch(decoded, i), "compacted topic cannot accept a record without a key")
        for i, length in enumerate(key_lengths) if length == -1])


def _index_in_batch(decoded: Any, i: int) -> int:
    """Record ``i`` of ``decoded`` by its index in its batch (a client's batch numbers its
    records by offset delta 0, 1, ...)."""
    return int(decoded.offsets[i] - decoded.batches[decoded.batch_index[i]].base_offset)


def needs_recompression(headers: list[Any], codec: int) -> bool:
    """True when a data batch of ``headers`` is not stored with ``codec``."""
    return any(h.compression != codec and not h.is_control for h in headers)


def recompress(buf: memoryview, headers: list[Any], codec: int, level: int | None) -> bytearray:
    """The whole batches of ``buf`` (``headers`` as validated) with every data batch in
    ``codec`` at ``level`` (None: the codec's default)."""
    out = bytearray()
    position = 0
    for header in headers:
        raw = buf[position:position + header.size]
        position += header.size
        if header.is_control or header.compression == codec:
            out += raw
        else:
            out += _rebuild(raw, header, codec, level)
    return out


def _rebuild(raw: memoryview, header: Any, codec: int, level: int | None) -> bytes | bytearray:
    decoded = core_records.decode_records(raw, max_decompressed_size=2**31 - 1)
    records = [(decoded.key(i), decoded.value(i), decoded.timestamps[i], decoded.headers(i))
               for i in range(len(decoded))]
    core_compresses = codec in (0, _SNAPPY) or _CORE_LEVELS.get(codec, -1) == level
    batch = core_records.build_batch(
        records, base_offset=header.base_offset, compression=codec if core_compresses else 0,
        producer_id=header.producer_id, producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence, partition_leader_epoch=header.partition_leader_epoch,
        timestamp_type=header.timestamp_type, is_transactional=header.is_transactional,
        offset_deltas=[offset - header.base_offset for offset in decoded.offsets],
        last_offset_delta=header.last_offset_delta)
    if core_compresses:
        return batch
    return _compress_built(batch, codec, level)


def _compress_built(batch: bytes, codec: int, level: int | None) -> bytearray:
    """An uncompressed batch from build_batch, its records compressed at ``level``."""
    body = memoryview(batch)[_HEADER_SIZE:]
    if codec == _GZIP:
        payload = bytes(cramjam.gzip.compress(body, level=level))
    elif codec == _LZ4:
        # An LZ4 frame of independent blocks without a content checksum (KIP-57).
        compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
        compressor.compress(body)
        payload = bytes(compressor.finish())
    else:
        payload = bytes(cramjam.zstd.compress(body, level=level))
    out = bytearray(batch[:_HEADER_SIZE])
    out += payload
    length_at, attributes_at, crc_at = _OFFSETS["batch_length"], _OFFSETS["attributes"], _OFFSETS["crc"]
    out[length_at:length_at + 4] = (len(out) - 12).to_bytes(4, "big")
    attributes = int.from_bytes(out[attributes_at:attributes_at + 2], "big")
    out[attributes_at:attributes_at + 2] = ((attributes & ~core_records.ATTR_CODEC_MASK) | codec).to_bytes(2, "big")
    out[crc_at:crc_at + 4] = crc32c(out, attributes_at).to_bytes(4, "big")
    return out
