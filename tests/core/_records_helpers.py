"""Shared pieces of the record-batch tests: hand-made batches and a tiny xxHash32."""

from __future__ import annotations

import struct

import crc32c as crc32c_pkg

from pykfk._reference.records import write_varint

CODECS = (0, 1, 2, 3, 4)
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


def record_bytes(offset_delta: int, key: bytes | None, value: bytes | None,
                 headers: list[tuple[bytes, bytes | None]] = (), timestamp_delta: int = 0) -> bytes:
    """One v2 record encoded by hand (DefaultRecord layout)."""
    def field(b: bytes | None) -> bytes:
        return write_varint(-1) if b is None else write_varint(len(b)) + b

    body = b"\x00" + write_varint(timestamp_delta) + write_varint(offset_delta) + field(key) + field(value)
    body += write_varint(len(headers)) + b"".join(field(k) + field(v) for k, v in headers)
    return write_varint(len(body)) + body


def make_batch(area: bytes, records_count: int, last_offset_delta: int, *, attributes: int = 0,
               base_offset: int = 0, base_timestamp: int = 1_000, max_timestamp: int = 1_000,
               producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
               epoch: int = -1) -> bytes:
    """A magic 2 batch around an arbitrary records area, with a correct CRC-32C."""
    tail = struct.pack(">HiqqqhiI", attributes, last_offset_delta, base_timestamp, max_timestamp,
                       producer_id, producer_epoch, base_sequence, records_count & 0xFFFFFFFF) + area
    head = struct.pack(">qiib", base_offset, len(tail) + 9, epoch, 2)
    return head + struct.pack(">I", crc32c_pkg.crc32c(tail)) + tail


def fix_crc(batch: bytes | bytearray) -> bytes:
    """The batch with its CRC-32C recomputed (after a deliberate edit)."""
    b = bytearray(batch)
    struct.pack_into(">I", b, 17, crc32c_pkg.crc32c(bytes(b[21:])))
    return bytes(b)


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 (the LZ4 frame header checksum), straight from its specification."""
    p1, p2, p3, p4, p5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
    mask = 0xFFFFFFFF

    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & mask

    n, i = len(data), 0
    if n >= 16:
        v = [(seed + p1 + p2) & mask, (seed + p2) & mask, seed & mask, (seed - p1) & mask]
        while i + 16 <= n:
            for j in range(4):
                lane = int.from_bytes(data[i + 4 * j:i + 4 * j + 4], "little")
                v[j] = (rotl((v[j] + lane * p2) & mask, 13) * p1) & mask
            i += 16
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & mask
    else:
        h = (seed + p5) & mask
    h = (h + n) & mask
    while i + 4 <= n:
        h = (rotl((h + int.from_bytes(data[i:i + 4], "little") * p3) & mask, 17) * p4) & mask
        i += 4
    while i < n:
        h = (rotl((h + data[i] * p5) & mask, 11) * p1) & mask
        i += 1
    h ^= h >> 15
    h = (h * p2) & mask
    h ^= h >> 13
    h = (h * p3) & mask
    return h ^ (h >> 16)


def lz4_with_old_kafka_checksum(frame: bytes) -> bytes:
    """An LZ4 frame whose header checksum is computed the way Kafka 0.8/0.9 did (over the
    magic number too), as kafka-python writes it for magic 0 messages."""
    flg = frame[4]
    desc_len = 2 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    wrong = (xxh32(frame[:4 + desc_len]) >> 8) & 0xFF
    return frame[:4 + desc_len] + bytes([wrong]) + frame[5 + desc_len:]
