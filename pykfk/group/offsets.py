"""Record layouts of the internal topic ``__consumer_offsets`` and the group -> partition map.

Mirrors apache/kafka's group coordinator records (``OffsetCommitKey``/``OffsetCommitValue``,
``GroupMetadataKey``/``GroupMetadataValue`` in group-coordinator/src/main/resources/common/
message/, written by ``GroupMetadataManager``), so tools that read the topic understand it.

Every key starts with an int16 that says what the record is (Kafka calls it the key version
in 0.9-3.x and the record's ``apiKey`` since the KIP-848 rewrite; the numbers are the same):

    key type 0 or 1  offset commit   group string, topic string, partition int32
    key type 2       group metadata  group string
    key type 3+      newer coordinators' records (KIP-848 ...): skipped when loading

Values start with an int16 version. A null value is a tombstone: the key is deleted.
Strings are int16 length + UTF-8 (-1 = null); bytes are int32 length + data (-1 = null);
arrays are int32 count + elements. Version 4 of both values is the "flexible" encoding
(unsigned-varint length + 1, tagged fields after each struct); we read it, never write it.

Offset commit value (we write v3; v1 when the commit carries an explicit expiry):

    field              type    versions
    offset             int64   0+
    leader_epoch       int32   3+      (-1 = unknown)
    metadata           string  0+
    commit_timestamp   int64   0+
    expire_timestamp   int64   1 only  (-1 = none)

Group metadata value (we write v3):

    protocol_type            string            0+
    generation               int32             0+
    protocol                 nullable string   0+
    leader                   nullable string   0+
    current_state_timestamp  int64             2+   (-1 = unknown)
    members                  array of:         0+
      member_id              string            0+
      group_instance_id      nullable string   3+
      client_id              string            0+
      client_host            string            0+
      rebalance_timeout      int32             1+
      session_timeout        int32             0+
      subscription           bytes             0+
      assignment             bytes             0+

No checksum is kept here: the record batch that carries these records has its CRC-32C.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import NamedTuple

OFFSETS_TOPIC = "__consumer_offsets"

# Key types (the leading int16 of every key).
OFFSET_COMMIT_KEY_VERSION = 1  # Kafka writes 1; 0 is the same layout from 0.8.2
GROUP_METADATA_KEY_VERSION = 2

# Value versions this module writes (GroupMetadataManager since Kafka 2.3).
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

_INT32_MIN = -(1 << 31)


class OffsetsRecordError(ValueError):
    """A __consumer_offsets key or value that does not follow the layout above."""


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


def _string(value: str) -> bytes:
    data = value.encode("utf-8")
    if len(data) > 0x7FFF:
        raise OffsetsRecordError(f"string of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def _nullable_string(value: str | None) -> bytes:
    return _INT16.pack(-1) if value is None else _string(value)


def _bytes(value: bytes) -> bytes:
    return _INT32.pack(len(value)) + bytes(value)


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    return (
        _INT16.pack(OFFSET_COMMIT_KEY_VERSION)
        + _string(group)
        + _string(topic)
        + _INT32.pack(partition)
    )


def encode_group_metadata_key(group: str) -> bytes:
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def encode_offset_commit_value(value: OffsetAndMetadata) -> bytes:
    """Value v3, or v1 when an explicit expire timestamp must be kept (as Kafka does)."""
    if value.expire_timestamp >= 0:
        return b"".join((
            _INT16.pack(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY),
            _INT64.pack(value.offset),
            _string(value.metadata),
            _INT64.pack(value.commit_timestamp),
            _INT64.pack(value.expire_timestamp),
        ))
    return b"".join((
        _INT16.pack(OFFSET_COMMIT_VALUE_VERSION),
        _INT64.pack(value.offset),
        _INT32.pack(value.leader_epoch),
        _string(value.metadata),
        _INT64.pack(value.commit_timestamp),
    ))


def encode_group_metadata_value(value: GroupMetadataRecord) -> bytes:
    parts = [
        _INT16.pack(GROUP_METADATA_VALUE_VERSION),
        _string(value.protocol_type),
        _INT32.pack(value.generation),
        _nullable_string(value.protocol),
        _nullable_string(value.leader),
        _INT64.pack(value.current_state_timestamp),
        _INT32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += (
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _INT32.pack(m.rebalance_timeout),
            _INT32.pack(m.session_timeout),
            _bytes(m.subscription),
            _bytes(m.assignment),
        )
    return b"".join(parts)


# -- reading ----------------------------------------------------------------------------


class _Reader:
    """Bounds-checked cursor over one key or value; ``flexible`` selects the compact
    encodings of version 4."""

    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, bytes) else buf
        self.pos = pos
        self.flexible = False

    def _take(self, n: int, what: str) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise OffsetsRecordError(
                f"{what}: needs {n} bytes at {self.pos}, record has {len(self.buf)}")
        data = bytes(self.buf[self.pos:end])
        self.pos = end
        return data

    def int16(self, what: str) -> int:
        return int(_INT16.unpack(self._take(2, what))[0])

    def int32(self, what: str) -> int:
        return int(_INT32.unpack(self._take(4, what))[0])

    def int64(self, what: str) -> int:
        return int(_INT64.unpack(self._take(8, what))[0])

    def uvarint(self, what: str) -> int:
        value = shift = 0
        while True:
            byte = self._take(1, what)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise OffsetsRecordError(f"{what}: unsigned varint longer than 5 bytes")

    def _length(self, what: str, wide: bool) -> int:
        if self.flexible:
            return self.uvarint(what) - 1
        return self.int32(what) if wide else self.int16(what)

    def nullable_string(self, what: str) -> str | None:
        n = self._length(what, wide=False)
        if n < 0:
            return None
        try:
            return self._take(n, what).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise OffsetsRecordError(f"{what}: not UTF-8 ({exc.reason})") from None

    def string(self, what: str) -> str:
        value = self.nullable_string(what)
        if value is None:
            raise OffsetsRecordError(f"{what}: null where a string is required")
        return value

    def bytes_(self, what: str) -> bytes:
        n = self._length(what, wide=True)
        return b"" if n < 0 else self._take(n, what)

    def array_length(self, what: str) -> int:
        n = self._length(what, wide=True)
        if n < 0:
            raise OffsetsRecordError(f"{what}: null array")
        if n > len(self.buf) - self.pos:  # every element takes at least one byte
            raise OffsetsRecordError(f"{what}: {n} elements cannot fit in the record")
        return n

    def skip_tagged_fields(self, what: str) -> None:
        if self.flexible:
            for _ in range(self.uvarint(what)):
                self.uvarint(what)
                self._take(self.uvarint(what), what)

    def done(self, what: str) -> None:
        if self.pos != len(self.buf):
            raise OffsetsRecordError(f"{what}: {len(self.buf) - self.pos} trailing bytes")


def decode_key(
    key: bytes | bytearray | memoryview,
) -> OffsetCommitKey | GroupMetadataKey | UnknownKey:
    r = _Reader(key)
    key_type = r.int16("key type")
    if key_type in (0, 1):
        result: OffsetCommitKey | GroupMetadataKey = OffsetCommitKey(
            r.string("group"), r.string("topic"), r.int32("partition")
        )
    elif key_type == 2:
        result = GroupMetadataKey(r.string("group"))
    else:
        return UnknownKey(key_type)
    r.done("key")
    return result


def decode_offset_commit_value(value: bytes | bytearray | memoryview) -> OffsetAndMetadata:
    r = _Reader(value)
    version = r.int16("value version")
    if not 0 <= version <= 4:
        raise OffsetsRecordError(f"unknown offset commit value version {version}")
    r.flexible = version >= 4
    offset = r.int64("offset")
    leader_epoch = r.int32("leader_epoch") if version >= 3 else -1
    metadata = r.string("metadata")
    commit_timestamp = r.int64("commit_timestamp")
    expire_timestamp = r.int64("expire_timestamp") if version == 1 else -1
    r.skip_tagged_fields("tagged fields")
    r.done("offset commit value")
    return OffsetAndMetadata(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


def decode_group_metadata_value(value: bytes | bytearray | memoryview) -> GroupMetadataRecord:
    r = _Reader(value)
    version = r.int16("value version")
    if not 0 <= version <= 4:
        raise OffsetsRecordError(f"unknown group metadata value version {version}")
    r.flexible = version >= 4
    protocol_type = r.string("protocol_type")
    generation = r.int32("generation")
    protocol = r.nullable_string("protocol")
    leader = r.nullable_string("leader")
    current_state_timestamp = r.int64("current_state_timestamp") if version >= 2 else -1
    members = []
    for _ in range(r.array_length("members")):
        member_id = r.string("member_id")
        group_instance_id = r.nullable_string("group_instance_id") if version >= 3 else None
        client_id = r.string("client_id")
        client_host = r.string("client_host")
        session_timeout = rebalance_timeout = 0
        if version >= 1:
            rebalance_timeout = r.int32("rebalance_timeout")
        session_timeout = r.int32("session_timeout")
        if version == 0:
            rebalance_timeout = session_timeout  # v0 had one timeout for both
        subscription = r.bytes_("subscription")
        assignment = r.bytes_("assignment")
        r.skip_tagged_fields("member tagged fields")
        members.append(MemberRecord(
            member_id, group_instance_id, client_id, client_host,
            rebalance_timeout, session_timeout, subscription, assignment,
        ))
    r.skip_tagged_fields("tagged fields")
    r.done("group metadata value")
    return GroupMetadataRecord(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )
