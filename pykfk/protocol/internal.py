"""Record formats of the internal topics, declared as data like the wire messages and
read and written by the same codec (``codec.py``).

Each layout is Kafka's (group-coordinator/.../common/message/OffsetCommitKey.json and
siblings, transaction-coordinator/.../TransactionLogKey.json and TransactionLogValue.json,
share-coordinator/.../ShareSnapshotKey.json and ShareSnapshotValue.json,
clients/.../ConsumerProtocolSubscription.json and ConsumerProtocolAssignment.json), so
Kafka's tools read what pykfk writes. A record key or value starts with an int16 (the key
type or value version) that is not part of the declared struct: ``encode`` and ``decode``
take it as an argument. The packages that own the records (``group/offsets.py``,
``group/consumer_records.py``, ``txn/records.py``, ``client/group_member.py``,
``group/share/state_records.py``) map these
structs to their in-memory forms.

A new internal record: its Schema here (fields, versions, flexible versions as in Kafka's
JSON), an entry in ``FLEXIBLE_FROM`` and golden bytes in
``tests/protocol/test_internal_records.py``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

from . import codec
from .fields import Field, Schema
from .types import ProtocolError, Struct

_INT16 = struct.Struct(">h")

# -- __consumer_offsets: classic groups ------------------------------------------------

OFFSET_COMMIT_KEY = Schema("OffsetCommitKey", [
    Field("group", "string"),
    Field("topic", "string"),
    Field("partition", "int32"),
])

GROUP_METADATA_KEY = Schema("GroupMetadataKey", [Field("group", "string")])

OFFSET_COMMIT_VALUE = Schema("OffsetCommitValue", [
    Field("offset", "int64"),
    Field("leader_epoch", "int32", "3+", default=-1),
    Field("metadata", "string"),
    Field("commit_timestamp", "int64"),
    Field("expire_timestamp", "int64", "1", default=-1),
])

GROUP_METADATA_VALUE = Schema("GroupMetadataValue", [
    Field("protocol_type", "string"),
    Field("generation", "int32"),
    Field("protocol", "string", nullable="0+", default=None),
    Field("leader", "string", nullable="0+", default=None),
    Field("current_state_timestamp", "int64", "2+", default=-1),
    Field("members", "[]MemberMetadata", fields=[
        Field("member_id", "string"),
        Field("group_instance_id", "string", "3+", nullable="3+", default=None),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("rebalance_timeout", "int32", "1+"),
        Field("session_timeout", "int32"),
        Field("subscription", "bytes", nullable="0+"),
        Field("assignment", "bytes", nullable="0+"),
    ]),
])

# -- __consumer_offsets: consumer groups (KIP-848) --------------------------------------


def _topic_partitions(name: str) -> Field:
    return Field(name, "[]TopicPartitions", fields=[Field("topic_id", "uuid"), Field("partitions", "[]int32")])


CONSUMER_GROUP_KEY = Schema("ConsumerGroupKey", [Field("group_id", "string")])
CONSUMER_GROUP_MEMBER_KEY = Schema("ConsumerGroupMemberKey", [
    Field("group_id", "string"),
    Field("member_id", "string"),
])

CONSUMER_GROUP_METADATA_VALUE = Schema("ConsumerGroupMetadataValue", [
    Field("epoch", "int32"),
    Field("metadata_hash", "int64", tag=0),
])
CONSUMER_GROUP_PARTITION_METADATA_VALUE = Schema("ConsumerGroupPartitionMetadataValue", [
    Field("topics", "[]TopicMetadata", fields=[
        Field("topic_id", "uuid"),
        Field("topic_name", "string"),
        Field("num_partitions", "int32"),
        Field("partition_metadata", "[]PartitionMetadata", fields=[
            Field("partition", "int32"),
            Field("racks", "[]string"),
        ]),
    ]),
])
CONSUMER_GROUP_MEMBER_METADATA_VALUE = Schema("ConsumerGroupMemberMetadataValue", [
    Field("instance_id", "string", nullable="0+", default=None),
    Field("rack_id", "string", nullable="0+", default=None),
    Field("client_id", "string"),
    Field("client_host", "string"),
    Field("subscribed_topic_names", "[]string"),
    Field("subscribed_topic_regex", "string", nullable="0+", default=None),
    Field("rebalance_timeout_ms", "int32", default=-1),
    Field("server_assignor", "string", nullable="0+", default=None),
])
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE = Schema("ConsumerGroupTargetAssignmentMetadataValue", [
    Field("assignment_epoch", "int32"),
])
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE = Schema("ConsumerGroupTargetAssignmentMemberValue", [
    _topic_partitions("topic_partitions"),
])
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE = Schema("ConsumerGroupCurrentMemberAssignmentValue", [
    Field("member_epoch", "int32"),
    Field("previous_member_epoch", "int32"),
    Field("state", "int8"),
    _topic_partitions("assigned_partitions"),
    _topic_partitions("partitions_pending_revocation"),
])

# -- __transaction_state ------------------------------------------------------------------

TRANSACTION_LOG_KEY = Schema("TransactionLogKey", [Field("transactional_id", "string")])

TRANSACTION_LOG_VALUE = Schema("TransactionLogValue", [
    Field("producer_id", "int64"),
    Field("previous_producer_id", "int64", "1+", tag=0, default=-1),
    Field("next_producer_id", "int64", "1+", tag=1, default=-1),
    Field("producer_epoch", "int16"),
    Field("transaction_timeout_ms", "int32"),
    Field("transaction_status", "int8"),
    Field("transaction_partitions", "[]PartitionsSchema", nullable="0+", fields=[
        Field("topic", "string"),
        Field("partition_ids", "[]int32"),
    ]),
    Field("transaction_last_update_timestamp_ms", "int64"),
    Field("transaction_start_timestamp_ms", "int64"),
    Field("client_transaction_version", "int16", "1+", tag=2, default=0),
])

# -- __share_group_state -----------------------------------------------------------------

SHARE_SNAPSHOT_KEY = Schema("ShareSnapshotKey", [
    Field("group_id", "string"),
    Field("topic_id", "uuid"),
    Field("partition", "int32"),
])

SHARE_SNAPSHOT_VALUE = Schema("ShareSnapshotValue", [
    Field("snapshot_epoch", "uint16"),
    Field("state_epoch", "int32"),
    Field("leader_epoch", "int32"),
    Field("start_offset", "int64"),
    Field("state_batches", "[]StateBatch", fields=[
        Field("first_offset", "int64"),
        Field("last_offset", "int64"),
        Field("delivery_state", "int8"),
        Field("delivery_count", "int16"),
    ]),
])

# -- the consumer protocol's member metadata (JoinGroup / SyncGroup bytes) --------------------

CONSUMER_PROTOCOL_SUBSCRIPTION = Schema("ConsumerProtocolSubscription", [
    Field("topics", "[]string"),
    Field("user_data", "bytes", nullable="0+", default=None),
])

CONSUMER_PROTOCOL_ASSIGNMENT = Schema("ConsumerProtocolAssignment", [
    Field("assigned_partitions", "[]TopicPartition", fields=[
        Field("topic", "string"),
        Field("partitions", "[]int32"),
    ]),
    Field("user_data", "bytes", nullable="0+", default=None),
])

# The first flexible version of each struct (Kafka's "flexibleVersions"); absent: never.
FLEXIBLE_FROM: dict[str, int] = {
    OFFSET_COMMIT_VALUE.name: 4,
    GROUP_METADATA_VALUE.name: 4,
    TRANSACTION_LOG_VALUE.name: 1,
    CONSUMER_GROUP_METADATA_VALUE.name: 0,
    CONSUMER_GROUP_PARTITION_METADATA_VALUE.name: 0,
    CONSUMER_GROUP_MEMBER_METADATA_VALUE.name: 0,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE.name: 0,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE.name: 0,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE.name: 0,
    SHARE_SNAPSHOT_VALUE.name: 0,
}


class InternalRecordError(ValueError):
    """Bytes or values that do not fit the declared record layout."""


def _flexible(schema: Schema, version: int) -> bool:
    first = FLEXIBLE_FROM.get(schema.name)
    return first is not None and version >= first


def encode(schema: Schema, version: int, body: Mapping[str, Any], prefix: int | None = None) -> bytes:
    """``body`` as ``schema`` at ``version``, after the int16 ``prefix`` (key type or value
    version) when given; missing fields take their declared default."""
    out = bytearray() if prefix is None else bytearray(_INT16.pack(prefix))
    extra: list[Any] = []
    try:
        codec.encoder(schema, version, _flexible(schema, version))(out, body, extra)
    except (struct.error, ValueError, TypeError, OverflowError) as exc:
        raise InternalRecordError(f"{schema.name} v{version}: {exc}") from None
    return bytes(out) if not extra else b"".join(bytes(c) for c in codec.chunks_from(out, extra))


def read_prefix(data: bytes | bytearray | memoryview, what: str) -> int:
    """The int16 a key or value starts with."""
    if len(data) < 2:
        raise InternalRecordError(f"{what}: {len(data)} bytes, shorter than its int16 {what}")
    return int(_INT16.unpack_from(data)[0])


def decode(schema: Schema, version: int, data: bytes | bytearray | memoryview,
           start: int = 2, *, whole: bool = True) -> Struct:
    """The struct at ``start`` of ``data`` (after the int16 prefix by default); with
    ``whole``, bytes left after it are an error."""
    view = memoryview(data).cast("B")
    try:
        value, end = codec.decoder(schema, version, _flexible(schema, version))(view, start)
    except (struct.error, IndexError, OverflowError, ProtocolError, UnicodeDecodeError) as exc:
        raise InternalRecordError(f"{schema.name} v{version}: {exc}") from None
    if whole and end != len(view):
        raise InternalRecordError(f"{schema.name} v{version}: {len(view) - end} trailing bytes")
    return value
