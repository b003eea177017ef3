"""The topic settings a leader checks produced batches against, beyond what the compiled
core validates: the CreateTime window of KIP-937 and the topic's ``compression.type``.

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

from typing import Any

import cramjam

from pykfk._core import records as core_records
from pykfk._core.crc import crc32c
from pykfk.errors import ErrorCode, KafkaError

_OFFSETS = core_records.BATCH_FIELD_OFFSETS
_HEADER_SIZE = core_records.BATCH_HEADER_SIZE
_GZIP, _SNAPPY, _LZ4, _ZSTD = 1, 2, 3, 4
# The levels pykfk._core.records.build_batch compresses with (Kafka's defaults, KIP-390):
# a batch at these levels is built by the core in one step.
_CORE_LEVELS = {_GZIP: None, _LZ4: 9, _ZSTD: 3}


def check_timestamps(buf: memoryview, headers: list[Any], window: tuple[int, int], now_ms: int) -> None:
    """INVALID_TIMESTAMP for the first record outside [now - before, now + after]. Every
    record is read (a negative timestamp delta can put one below its batch's base
    timestamp, which the header would not show); only topics with a window pay for it."""
    before, after = window
    low, high = now_ms - before, now_ms + after
    stamps = core_records.decode_records(buf).timestamps
    if not stamps or (low <= min(stamps) and max(stamps) <= high):
        return
    for stamp in stamps:
        if stamp < low:
            raise KafkaError(ErrorCode.INVALID_TIMESTAMP,
                             f"timestamp {stamp} of a record is more than {before} ms before the broker's time "
                             f"{now_ms} (message.timestamp.before.max.ms)")
        if stamp > high:
            raise KafkaError(ErrorCode.INVALID_TIMESTAMP,
                             f"timestamp {stamp} of a record is more than {after} ms after the broker's time "
                             f"{now_ms} (message.timestamp.after.max.ms)")


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
