"""Records of consumer-protocol groups (KIP-848) in ``__consumer_offsets``.

Kafka's group coordinator writes these (group-coordinator/src/main/resources/common/
message/ConsumerGroup*.json); pykfk writes the same layouts so a restarted or newly elected
coordinator, or a tool reading the topic, sees the same groups. A key is an int16 record
type and the key fields in the classic encoding; a value is an int16 version (0) and the
fields in the flexible encoding (compact strings, tagged fields). A null value deletes. The
layouts are declared in ``pykfk/protocol/internal.py``.

    type  record                                    key                 value
    3     ConsumerGroupMetadata                     group               epoch
    4     ConsumerGroupPartitionMetadata            group               subscribed topics (id, name, partitions)
    5     ConsumerGroupMemberMetadata               group, member       instance, rack, client, subscription, ...
    6     ConsumerGroupTargetAssignmentMetadata     group               assignment epoch
    7     ConsumerGroupTargetAssignmentMember        group, member       target partitions
    8     ConsumerGroupCurrentMemberAssignment      group, member       epochs, state, assigned, pending revocation
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, NamedTuple

from pykfk.group.offsets import OffsetsRecordError
from pykfk.protocol import internal
from pykfk.protocol.fields import Schema
from pykfk.protocol.types import Struct

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
RECORD_TYPES = frozenset(range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1))
# Types whose key names a member as well as the group.
_MEMBER_KEYED = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})

_VALUE_VERSION = 0

_VALUES: dict[int, Schema] = {
    GROUP_METADATA: internal.CONSUMER_GROUP_METADATA_VALUE,
    PARTITION_METADATA: internal.CONSUMER_GROUP_PARTITION_METADATA_VALUE,
    MEMBER_METADATA: internal.CONSUMER_GROUP_MEMBER_METADATA_VALUE,
    TARGET_ASSIGNMENT_METADATA: internal.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA_VALUE,
    TARGET_ASSIGNMENT_MEMBER: internal.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER_VALUE,
    CURRENT_MEMBER_ASSIGNMENT: internal.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT_VALUE,
}


class ConsumerGroupRecordKey(NamedTuple):
    """A decoded key: the record type, the group and (member-keyed types) the member."""

    record_type: int
    group_id: str
    member_id: str = ""


def is_consumer_group_key(key: bytes | bytearray | memoryview) -> bool:
    return len(key) >= 2 and internal.read_prefix(key, "key type") in RECORD_TYPES


def _key_schema(record_type: int) -> Schema:
    return internal.CONSUMER_GROUP_MEMBER_KEY if record_type in _MEMBER_KEYED else internal.CONSUMER_GROUP_KEY


def encode_key(record_type: int, group_id: str, member_id: str | None = None) -> bytes:
    return internal.encode(_key_schema(record_type), 0, {"group_id": group_id, "member_id": member_id or ""},
                           prefix=record_type)


def encode_value(record_type: int, fields: Mapping[str, Any]) -> bytes:
    return internal.encode(_VALUES[record_type], _VALUE_VERSION, fields, prefix=_VALUE_VERSION)


def decode_key(key: bytes | bytearray | memoryview) -> ConsumerGroupRecordKey:
    record_type = internal.read_prefix(key, "key type")
    if record_type not in RECORD_TYPES:
        raise OffsetsRecordError(f"key type {record_type} is not a consumer group record")
    fields = internal.decode(_key_schema(record_type), 0, key)
    return ConsumerGroupRecordKey(record_type, fields.group_id, fields.get("member_id", ""))


def decode_value(record_type: int, value: bytes | bytearray | memoryview) -> Struct:
    """The value's fields; a newer value version is read as far as version 0 goes (Kafka
    only adds tagged fields to these within a version)."""
    version = internal.read_prefix(value, "value version")
    if version < 0:
        raise OffsetsRecordError(f"value version {version}")
    return internal.decode(_VALUES[record_type], _VALUE_VERSION, value)


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
