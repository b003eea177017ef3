"""Record layouts of the internal topic ``__consumer_offsets`` and the group -> partition map.

Mirrors apache/kafka's group coordinator records (``OffsetCommitKey``/``OffsetCommitValue``,
``GroupMetadataKey``/``GroupMetadataValue`` in group-coordinator/src/main/resources/common/
message/, written by ``GroupMetadataManager``), so tools that read the topic understand it.

Every key starts with an int16 that says what the record is (Kafka calls it the key version
in 0.9-3.x and the record's ``apiKey`` since the KIP-848 rewrite; the numbers are the same):

    key type 0 or 1  offset commit   group string, topic string, partition int32
    key type 2       group metadata  group string
    key type 3+      newer coordinators' records (KIP-848 ...): skipped when loading

Values start with an int16 version. A null value is a tombstone: the key is deleted. The
layouts of every version are declared in ``pykfk/protocol/internal.py`` and read and written
by the protocol codec; version 4 of both values is the flexible encoding, read, never
written. We write offset commit value v3 (v1 when the commit carries an explicit expiry)
and group metadata value v3, as Kafka since 2.3.

No checksum is kept here: the record batch that carries these records has its CRC-32C.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

from pykfk.protocol import internal

OFFSETS_TOPIC = "__consumer_offsets"

# Key types (the leading int16 of every key).
OFFSET_COMMIT_KEY_VERSION = 1  # Kafka writes 1; 0 is the same layout from 0.8.2
GROUP_METADATA_KEY_VERSION = 2

# Value versions this module writes (GroupMetadataManager since Kafka 2.3).
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_INT32_MIN = -(1 << 31)


# A __consumer_offsets key or value that does not follow the layout above.
OffsetsRecordError = internal.InternalRecordError


# -- group -> partition -----------------------------------------------------------------


def java_string_hash(text: str) -> int:
    """``java.lang.String.hashCode()``: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code
    units, in signed 32-bit arithmetic."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group, as Kafka computes it:
    ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``. Kafka's Utils.abs maps
    Integer.MIN_VALUE to 0 (Math.abs would leave it negative)."""
    h = java_string_hash(group_id)
    return (0 if h == _INT32_MIN else abs(h)) % num_partitions


# -- decoded forms ----------------------------------------------------------------------


class OffsetCommitKey(NamedTuple):
    group: str
    topic: str
    partition: int


class GroupMetadataKey(NamedTuple):
    group: str


class UnknownKey(NamedTuple):
    """A record type this coordinator does not handle (skipped on load)."""

    key_type: int


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset as kept in memory and in an offset commit value."""

    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    # Set only by OffsetCommit v2-v4 with retention_time_ms != -1 (stored as value v1).
    expire_timestamp: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberRecord, ...] = ()


# -- writing ----------------------------------------------------------------------------


# A group's commits name the same partitions again and again: a commit of 10,000
# partitions encoded every key anew (20 ms on the event loop).
@functools.lru_cache(maxsize=1 << 16)
def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return internal.encode(internal.OFFSET_COMMIT_KEY, 0,
                           {"group": group, "topic": topic, "partition": partition},
                           prefix=OFFSET_COMMIT_KEY_VERSION)


def encode_group_metadata_key(group: str) -> bytes:
    return internal.encode(internal.GROUP_METADATA_KEY, 0, {"group": group}, prefix=GROUP_METADATA_KEY_VERSION)


def encode_offset_commit_value(value: OffsetAndMetadata) -> bytes:
    """Value v3, or v1 when an explicit expire timestamp must be kept (as Kafka does)."""
    version = (OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY if value.expire_timestamp >= 0
               else OFFSET_COMMIT_VALUE_VERSION)
    # The fields as they are (dataclasses.asdict deep-copies each: half the encoding).
    fields = {"offset": value.offset, "metadata": value.metadata,
              "commit_timestamp": value.commit_timestamp, "leader_epoch": value.leader_epoch,
              "expire_timestamp": value.expire_timestamp}
    return internal.encode(internal.OFFSET_COMMIT_VALUE, version, fields, prefix=version)


def encode_group_metadata_value(value: GroupMetadataRecord) -> bytes:
    return internal.encode(internal.GROUP_METADATA_VALUE, GROUP_METADATA_VALUE_VERSION,
                           dataclasses.asdict(value), prefix=GROUP_METADATA_VALUE_VERSION)


# -- reading ----------------------------------------------------------------------------


def decode_key(
    key: bytes | bytearray | memoryview,
) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    key_type = internal.read_prefix(key, "key type")
    if key_type in (0, 1):
        k = internal.decode(internal.OFFSET_COMMIT_KEY, 0, key)
        return OffsetCommitKey(k.group, k.topic, k.partition)
    if key_type == 2:
        return GroupMetadataKey(internal.decode(internal.GROUP_METADATA_KEY, 0, key).group)
    return UnknownKey(key_type)


def _value_version(value: bytes | bytearray | memoryview, what: str) -> int:
    version = internal.read_prefix(value, "value version")
    if not 0 <= version <= 4:
        raise OffsetsRecordError(f"unknown {what} value version {version}")
    return version


def decode_offset_commit_value(value: bytes | bytearray | memoryview) -> OffsetAndMetadata:
    version = _value_version(value, "offset commit")
    v = internal.decode(internal.OFFSET_COMMIT_VALUE, version, value)
    return OffsetAndMetadata(v.offset, v.metadata, v.commit_timestamp, v.leader_epoch, v.expire_timestamp)


def decode_group_metadata_value(value: bytes | bytearray | memoryview) -> GroupMetadataRecord:
    version = _value_version(value, "group metadata")
    v = internal.decode(internal.GROUP_METADATA_VALUE, version, value)
    members = tuple(
        MemberRecord(
            m.member_id, m.group_instance_id, m.client_id, m.client_host,
            # v0 had one timeout for both
            m.session_timeout if version == 0 else m.rebalance_timeout, m.session_timeout,
            m.subscription or b"", m.assignment or b"",
        )
        for m in v.members
    )
    return GroupMetadataRecord(v.protocol_type, v.generation, v.protocol, v.leader,
                               v.current_state_timestamp, members)
