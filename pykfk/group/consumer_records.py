"""Records of consumer-protocol groups (KIP-848) in ``__consumer_offsets``.

Kafka's group coordinator writes these (group-coordinator/src/main/resources/common/
message/ConsumerGroup*.json); pykfk writes the same layouts so a restarted or newly elected
coordinator, or a tool reading the topic, sees the same groups. A key is an int16 record
type and the key fields in the classic encoding; a value is an int16 version (0) and the
fields in the flexible encoding (compact strings, tagged fields). A null value deletes.

    type  record                                    key                 value
    3     ConsumerGroupMetadata                     group               epoch
    4     ConsumerGroupPartitionMetadata            group               subscribed topics (id, name, partitions)
    5     ConsumerGroupMemberMetadata               group, member       instance, rack, client, subscription, ...
    6     ConsumerGroupTargetAssignmentMetadata     group               assignment epoch
    7     ConsumerGroupTargetAssignmentMember        group, member       target partitions
    8     ConsumerGroupCurrentMemberAssignment      group, member       epochs, state, assigned, pending revocation
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple

from pykfk.group.offsets import OffsetsRecordError
from pykfk.protocol import codec
from pykfk.protocol.schema import Field, Schema
from pykfk.protocol.types import ProtocolError, Struct

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
# Types whose key names a member as well as the group.
_MEMBER_KEYED = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

_INT16 = struct.Struct(">h")
_VALUE_VERSION = 0


def _topic_partitions(name: str) -> Field:
    return Field(name, "[]TopicPartitions", fields=[Field("topic_id", "uuid"), Field("partitions", "[]int32")])


_GROUP_KEY = Schema("ConsumerGroupKey", [Field("group_id", "string")])
_MEMBER_KEY = Schema("ConsumerGroupMemberKey", [Field("group_id", "string"), Field("member_id", "string")])

_VALUES: dict[int, Schema] = {
    GROUP_METADATA: Schema("ConsumerGroupMetadataValue", [
        Field("epoch", "int32"),
        Field("metadata_hash", "int64", tag=0),
    ]),
    PARTITION_METADATA: Schema("ConsumerGroupPartitionMetadataValue", [
        Field("topics", "[]TopicMetadata", fields=[
            Field("topic_id", "uuid"),
            Field("topic_name", "string"),
            Field("num_partitions", "int32"),
            Field("partition_metadata", "[]PartitionMetadata", fields=[
                Field("partition", "int32"),
                Field("racks", "[]string"),
            ]),
        ]),
    ]),
    MEMBER_METADATA: Schema("ConsumerGroupMemberMetadataValue", [
        Field("instance_id", "string", nullable="0+", default=None),
        Field("rack_id", "string", nullable="0+", default=None),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("subscribed_topic_names", "[]string"),
        Field("subscribed_topic_regex", "string", nullable="0+", default=None),
        Field("rebalance_timeout_ms", "int32", default=-1),
        Field("server_assignor", "string", nullable="0+", default=None),
    ]),
    TARGET_ASSIGNMENT_METADATA: Schema("ConsumerGroupTargetAssignmentMetadataValue", [
        Field("assignment_epoch", "int32"),
    ]),
    TARGET_ASSIGNMENT_MEMBER: Schema("ConsumerGroupTargetAssignmentMemberValue", [
        _topic_partitions("topic_partitions"),
    ]),
    CURRENT_MEMBER_ASSIGNMENT: Schema("ConsumerGroupCurrentMemberAssignmentValue", [
        Field("member_epoch", "int32"),
        Field("previous_member_epoch", "int32"),
        Field("state", "int8"),
        _topic_partitions("assigned_partitions"),
        _topic_partitions("partitions_pending_revocation"),
    ]),
}


class ConsumerGroupRecordKey(NamedTuple):
    """A decoded key: the record type, the group and (member-keyed types) the member."""

    record_type: int
    group_id: str
    member_id: str = ""


def is_consumer_group_key(key: bytes | bytearray | memoryview) -> bool:
    return len(key) >= 2 and _INT16.unpack_from(key)[0] in RECORD_TYPES


def _encode(schema: Schema, body: Mapping[str, Any], flexible: bool) -> bytes:
    out = bytearray()
    extra: list[Any] = []
    codec.encoder(schema, _VALUE_VERSION, flexible)(out, body, extra)
    return b"".join(bytes(c) for c in codec.chunks_from(out, extra))


def encode_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    if record_type in _MEMBER_KEYED:
        body = _encode(_MEMBER_KEY, {"group_id": group_id, "member_id": member_id or ""}, False)
    else:
        body = _encode(_GROUP_KEY, {"group_id": group_id}, False)
    return _INT16.pack(record_type) + body


def encode_value(record_type: int, fields: Mapping[str, Any]) -> bytes:
    return _INT16.pack(_VALUE_VERSION) + _encode(_VALUES[record_type], fields, True)


def _decode(schema: Schema, data: bytes | bytearray | memoryview, start: int, flexible: bool, what: str) -> Struct:
    view = memoryview(data)
    try:
        value, end = codec.decoder(schema, _VALUE_VERSION, flexible)(view, start)
    except (struct.error, IndexError, OverflowError, ProtocolError, UnicodeDecodeError) as exc:
        raise OffsetsRecordError(f"{what}: {exc}") from exc
    if end != len(view):
        raise OffsetsRecordError(f"{what}: {len(view) - end} trailing bytes")
    return value


def decode_key(key: bytes | bytearray | memoryview) -> ConsumerGroupRecordKey:
    if len(key) < 2:
        raise OffsetsRecordError("key shorter than its type")
    record_type = _INT16.unpack_from(key)[0]
    if record_type not in RECORD_TYPES:
        raise OffsetsRecordError(f"key type {record_type} is not a consumer group record")
    if record_type in _MEMBER_KEYED:
        fields = _decode(_MEMBER_KEY, key, 2, False, "consumer group key")
        return ConsumerGroupRecordKey(record_type, fields.group_id, fields.member_id)
    return ConsumerGroupRecordKey(record_type, _decode(_GROUP_KEY, key, 2, False, "consumer group key").group_id)


def decode_value(record_type: int, value: bytes | bytearray | memoryview) -> Struct:
    """The value's fields; a newer value version is read as far as version 0 goes (Kafka
    only adds tagged fields to these within a version)."""
    if len(value) < 2:
        raise OffsetsRecordError("value shorter than its version")
    version = _INT16.unpack_from(value)[0]
    if version < 0:
        raise OffsetsRecordError(f"value version {version}")
    return _decode(_VALUES[record_type], value, 2, True, f"consumer group record {record_type} value")


def topic_partitions(assignment: Mapping[uuid.UUID, frozenset[int]]) -> list[dict[str, Any]]:
    """An assignment as the records' (and the protocol's) TopicPartitions list."""
    return [{"topic_id": topic_id, "partitions": sorted(partitions)}
            for topic_id, partitions in sorted(assignment.items(), key=lambda item: str(item[0])) if partitions]


def assignment_of(entries: Any) -> dict[uuid.UUID, frozenset[int]]:
    """A TopicPartitions list (decoded) as an assignment."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for entry in entries or ():
        partitions = frozenset(entry.partitions) | out.get(entry.topic_id, frozenset())
        if partitions:
            out[entry.topic_id] = partitions
    return out
