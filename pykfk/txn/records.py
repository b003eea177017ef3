"""Record layouts of the internal topic ``__transaction_state`` (apache/kafka's
``TransactionLogKey`` / ``TransactionLogValue``, transaction-coordinator/src/main/
resources/common/message/), so Kafka's tools can read what pykfk writes.

Key (version 0; the leading int16 is the key version)::

    version          int16   0
    transactional_id string  int16 length + UTF-8

Value (we write version 0, the classic encoding; version 1 is flexible and adds tagged
fields, which we read and skip)::

    version                              int16
    producer_id                          int64
    producer_epoch                       int16
    transaction_timeout_ms               int32
    transaction_status                   int8    (TxnState)
    transaction_partitions               nullable array of:
      topic                              string
      partition_ids                      array of int32
    transaction_last_update_timestamp_ms int64
    transaction_start_timestamp_ms       int64

A null value is a tombstone: the transactional id expired. The record batch carrying
these records has its CRC-32C; nothing else is checksummed.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from collections.abc import Iterable

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 0


class TxnRecordError(ValueError):
    """A key or value of ``__transaction_state`` that does not parse."""


class TxnState(enum.IntEnum):
    """Kafka's TransactionState ids, as stored in ``transaction_status``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name Kafka's DescribeTransactions and ListTransactions use."""
        return "".join(part.capitalize() for part in self.name.split("_"))


@dataclasses.dataclass
class TxnRecord:
    """One TransactionLogValue."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    last_update_timestamp_ms: int
    start_timestamp_ms: int


def _string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">h", len(data)) + data


def encode_key(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _string(transactional_id)


def encode_value(record: TxnRecord) -> bytes:
    by_topic = partitions_by_topic(record.partitions)
    parts = [struct.pack(">hqhib", VALUE_VERSION, record.producer_id, record.producer_epoch,
                         record.transaction_timeout_ms, int(record.state)),
             struct.pack(">i", len(by_topic))]
    for topic, partitions in by_topic.items():
        parts.append(_string(topic))
        parts.append(struct.pack(f">i{len(partitions)}i", len(partitions), *partitions))
    parts.append(struct.pack(">qq", record.last_update_timestamp_ms, record.start_timestamp_ms))
    return b"".join(parts)


class _Cursor:
    """Bounds-checked reads over one key or value (compact encodings when flexible)."""

    def __init__(self, buf: bytes | bytearray | memoryview, flexible: bool = False):
        self.buf = bytes(buf)
        self.pos = 0
        self.flexible = flexible

    def take(self, size: int, what: str) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.buf):
            raise TxnRecordError(f"{what}: needs {size} bytes at {self.pos}, record has {len(self.buf)}")
        data = self.buf[self.pos:end]
        self.pos = end
        return data

    def unpack(self, layout: struct.Struct, what: str) -> int:
        return int(layout.unpack(self.take(layout.size, what))[0])

    def uvarint(self, what: str) -> int:
        value = shift = 0
        while shift <= 28:
            byte = self.take(1, what)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise TxnRecordError(f"{what}: unsigned varint longer than 5 bytes")

    def length(self, what: str, wide: bool) -> int:
        """A string's or array's length (-1 = null)."""
        if self.flexible:
            return self.uvarint(what) - 1
        return self.unpack(_INT32 if wide else _INT16, what)

    def string(self, what: str) -> str:
        size = self.length(what, wide=False)
        try:
            return self.take(max(size, 0), what).decode()
        except UnicodeDecodeError as exc:
            raise TxnRecordError(f"{what}: not UTF-8 ({exc.reason})") from None

    def skip_tagged_fields(self, what: str) -> None:
        if self.flexible:
            for _ in range(self.uvarint(what)):
                self.uvarint(what)
                self.take(self.uvarint(what), what)


_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


def decode_key(key: bytes | bytearray | memoryview) -> str | None:
    """The transactional id of a key; None for a key version this broker does not know."""
    cursor = _Cursor(key)
    if cursor.unpack(_INT16, "key version") != KEY_VERSION:
        return None
    return cursor.string("transactional_id")


def decode_value(value: bytes | bytearray | memoryview) -> TxnRecord:
    """Versions 0 and 1; TxnRecordError for bytes that do not parse."""
    cursor = _Cursor(value)
    version = cursor.unpack(_INT16, "value version")
    if version not in (0, 1):
        raise TxnRecordError(f"unknown transaction log value version {version}")
    cursor.flexible = version >= 1
    producer_id = cursor.unpack(_INT64, "producer_id")
    producer_epoch = cursor.unpack(_INT16, "producer_epoch")
    timeout_ms = cursor.unpack(_INT32, "transaction_timeout_ms")
    status = cursor.unpack(_INT8, "transaction_status")
    partitions: list[tuple[str, int]] = []
    for _ in range(max(cursor.length("transaction_partitions", wide=True), 0)):
        topic = cursor.string("topic")
        for _ in range(max(cursor.length("partition_ids", wide=True), 0)):
            partitions.append((topic, cursor.unpack(_INT32, "partition id")))
        cursor.skip_tagged_fields("partitions entry")
    last_update = cursor.unpack(_INT64, "transaction_last_update_timestamp_ms")
    start = cursor.unpack(_INT64, "transaction_start_timestamp_ms")
    cursor.skip_tagged_fields("value")
    try:
        state = TxnState(status)
    except ValueError:
        raise TxnRecordError(f"unknown transaction status {status}") from None
    return TxnRecord(producer_id, producer_epoch, timeout_ms, state, frozenset(partitions),
                     last_update, start)


def partitions_by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Topic -> sorted partition ids."""
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return out
