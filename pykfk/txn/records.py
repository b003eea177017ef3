"""Record layouts of the internal topic ``__transaction_state`` (apache/kafka's
``TransactionLogKey`` / ``TransactionLogValue``, transaction-coordinator/src/main/
resources/common/message/), so Kafka's tools can read what pykfk writes.

Key (version 0; the leading int16 is the key version)::

    version          int16   0
    transactional_id string  int16 length + UTF-8

Value (we write version 1, the flexible encoding Kafka writes once ``transaction.version``
is 1 or more; version 0, the classic one, is read too)::

    version                              int16
    producer_id                          int64
    previous_producer_id                 int64   tag 0 (v1), default -1
    next_producer_id                     int64   tag 1 (v1), default -1
    producer_epoch                       int16
    transaction_timeout_ms               int32
    transaction_status                   int8    (TxnState)
    transaction_partitions               nullable array of:
      topic                              string
      partition_ids                      array of int32
    transaction_last_update_timestamp_ms int64
    transaction_start_timestamp_ms       int64
    client_transaction_version           int16   tag 2 (v1), default 0

The tagged fields (written only when not their default, as Kafka does) carry what
transaction version 2 needs across a reload: the new producer id a transaction ending at
the exhausted epoch hands over (``next_producer_id``, set while it is being committed or
aborted), the producer id before each change (``previous_producer_id``: after that hand
over, the one a retried EndTxn names) and the transaction version of the client's last
EndTxn (``client_transaction_version``: 2 when the transaction ended at epoch + 1).

The layouts are declared in ``pykfk/protocol/internal.py`` and read and written by the
protocol codec. A null value is a tombstone: the transactional id expired. The record batch carrying
these records has its CRC-32C; nothing else is checksummed.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable

from pykfk.protocol import internal

TRANSACTION_STATE_TOPIC = "__transaction_state"
KEY_VERSION = 0
VALUE_VERSION = 1


# A key or value of ``__transaction_state`` that does not parse.
TxnRecordError = internal.InternalRecordError


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
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    return internal.encode(internal.TRANSACTION_LOG_KEY, KEY_VERSION, {"transactional_id": transactional_id},
                           prefix=KEY_VERSION)


def encode_value(record: TxnRecord) -> bytes:
    body = {
        "producer_id": record.producer_id,
        "producer_epoch": record.producer_epoch,
        "transaction_timeout_ms": record.transaction_timeout_ms,
        "transaction_status": int(record.state),
        "transaction_partitions": [{"topic": topic, "partition_ids": ids}
                                   for topic, ids in partitions_by_topic(record.partitions).items()],
        "transaction_last_update_timestamp_ms": record.last_update_timestamp_ms,
        "transaction_start_timestamp_ms": record.start_timestamp_ms,
        "previous_producer_id": record.previous_producer_id,
        "next_producer_id": record.next_producer_id,
        "client_transaction_version": record.client_transaction_version,
    }
    return internal.encode(internal.TRANSACTION_LOG_VALUE, VALUE_VERSION, body, prefix=VALUE_VERSION)


def decode_key(key: bytes | bytearray | memoryview) -> str | None:
    """The transactional id of a key; None for a key version this broker does not know."""
    if internal.read_prefix(key, "key version") != KEY_VERSION:
        return None
    transactional_id: str = internal.decode(internal.TRANSACTION_LOG_KEY, KEY_VERSION, key).transactional_id
    return transactional_id


def decode_value(value: bytes | bytearray | memoryview) -> TxnRecord:
    """Versions 0 and 1; TxnRecordError for bytes that do not parse."""
    version = internal.read_prefix(value, "value version")
    if version not in (0, 1):
        raise TxnRecordError(f"unknown transaction log value version {version}")
    v = internal.decode(internal.TRANSACTION_LOG_VALUE, version, value)
    try:
        state = TxnState(v.transaction_status)
    except ValueError:
        raise TxnRecordError(f"unknown transaction status {v.transaction_status}") from None
    partitions = frozenset((entry.topic, partition)
                           for entry in v.transaction_partitions or () for partition in entry.partition_ids)
    return TxnRecord(v.producer_id, v.producer_epoch, v.transaction_timeout_ms, state, partitions,
                     v.transaction_last_update_timestamp_ms, v.transaction_start_timestamp_ms,
                     v.previous_producer_id, v.next_producer_id, v.client_transaction_version)


def partitions_by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    """Topic -> sorted partition ids."""
    out: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        out.setdefault(topic, []).append(partition)
    return out
