"""__consumer_offsets record layouts and the group -> partition map, checked against an
independent reader written from the Kafka message specs (OffsetCommitKey/Value,
GroupMetadataKey/Value) rather than against our own decoder."""

from __future__ import annotations

import ctypes
import struct

import pytest

from pykfk.group.offsets import (
    GroupMetadataKey,
    GroupMetadataRecord,
    MemberRecord,
    OffsetAndMetadata,
    OffsetCommitKey,
    OffsetsRecordError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
)

# -- an independent reader, straight from the spec ------------------------------------------


class SpecReader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def fmt(self, f: str):
        (value,) = struct.unpack_from(f, self.data, self.pos)
        self.pos += struct.calcsize(f)
        return value

    def string(self):
        n = self.fmt(">h")
        if n == -1:
            return None
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self):
        n = self.fmt(">i")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def at_end(self):
        return self.pos == len(self.data)


def spec_read_group_metadata_v3(data: bytes) -> dict:
    r = SpecReader(data)
    out = {"version": r.fmt(">h"), "protocol_type": r.string(), "generation": r.fmt(">i"),
           "protocol": r.string(), "leader": r.string(), "current_state_timestamp": r.fmt(">q"),
           "members": []}
    for _ in range(r.fmt(">i")):
        out["members"].append({
            "member_id": r.string(), "group_instance_id": r.string(), "client_id": r.string(),
            "client_host": r.string(), "rebalance_timeout": r.fmt(">i"),
            "session_timeout": r.fmt(">i"), "subscription": r.bytes_(), "assignment": r.bytes_(),
        })
    assert r.at_end()
    return out


# -- hashing ----------------------------------------------------------------------------------


def reference_hash(text: str) -> int:
    """String.hashCode for BMP strings with C int32 wrap-around, one char at a time."""
    h = ctypes.c_int32(0)
    for ch in text:
        h = ctypes.c_int32(31 * h.value + ord(ch))
    return h.value


@pytest.mark.parametrize("text, expected", [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("polygenelubricants", -(2**31)),  # the classic String whose hashCode is Integer.MIN_VALUE
])
def test_java_string_hash_known_values(text, expected):
    assert java_string_hash(text) == expected


@pytest.mark.parametrize(
    "text", ["console-consumer-12345", "my-group", "zzzzzzzzzzzzzzzz", "grüße"])
def test_java_string_hash_matches_int32_reference(text):
    assert java_string_hash(text) == reference_hash(text)


def test_java_string_hash_uses_utf16_code_units():
    # U+1F600 is the surrogate pair D83D DE00 in Java's UTF-16 String.
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00


def test_partition_for_maps_min_value_to_zero_and_is_never_negative():
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("polygenelubricants", 7) == 0
    for gid in ["a", "hello", "zzzzzzzzzzzzzzzz", "console-consumer-1"]:
        h = reference_hash(gid)
        assert partition_for(gid, 50) == abs(h) % 50
        assert 0 <= partition_for(gid, 50) < 50


# -- keys ---------------------------------------------------------------------------------


def test_offset_commit_key_bytes():
    key = encode_offset_commit_key("g", "topic", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x05topic" + b"\x00\x00\x00\x03"
    assert decode_key(key) == OffsetCommitKey("g", "topic", 3)
    # Key version 0 has the same layout (Kafka 0.8.2 - 0.9).
    assert decode_key(b"\x00\x00" + key[2:]) == OffsetCommitKey("g", "topic", 3)


def test_group_metadata_key_bytes():
    key = encode_group_metadata_key("my-group")
    assert key == b"\x00\x02\x00\x08my-group"
    assert decode_key(key) == GroupMetadataKey("my-group")


def test_unknown_key_types_are_reported_not_raised():
    assert decode_key(b"\x00\x03\x00\x01g") == UnknownKey(3)


# -- offset commit values -----------------------------------------------------------------------


def test_offset_commit_value_v3_bytes():
    value = encode_offset_commit_value(OffsetAndMetadata(42, "meta", 1700000000000, 7))
    r = SpecReader(value)
    assert r.fmt(">h") == 3
    assert r.fmt(">q") == 42
    assert r.fmt(">i") == 7
    assert r.string() == "meta"
    assert r.fmt(">q") == 1700000000000
    assert r.at_end()
    assert decode_offset_commit_value(value) == OffsetAndMetadata(42, "meta", 1700000000000, 7)


def test_offset_commit_value_with_expiry_is_v1():
    om = OffsetAndMetadata(5, "", 1000, -1, expire_timestamp=9000)
    value = encode_offset_commit_value(om)
    r = SpecReader(value)
    fields = (r.fmt(">h"), r.fmt(">q"), r.string(), r.fmt(">q"), r.fmt(">q"))
    assert fields == (1, 5, "", 1000, 9000)
    assert r.at_end()
    assert decode_offset_commit_value(value) == om


def test_offset_commit_value_older_versions_decode():
    v0 = struct.pack(">hq", 0, 11) + b"\x00\x02md" + struct.pack(">q", 123)
    assert decode_offset_commit_value(v0) == OffsetAndMetadata(11, "md", 123)
    v2 = struct.pack(">hq", 2, 12) + b"\x00\x00" + struct.pack(">q", 124)
    assert decode_offset_commit_value(v2) == OffsetAndMetadata(12, "", 124)


def test_offset_commit_value_v4_flexible_decodes():
    # offset, leader_epoch, compact string "ab" (length+1 = 3), commit ts, one tagged field
    v4 = (struct.pack(">hqi", 4, 99, 2) + b"\x03ab" + struct.pack(">q", 55)
          + b"\x01" + b"\x00" + b"\x02zz")
    assert decode_offset_commit_value(v4) == OffsetAndMetadata(99, "ab", 55, 2)


# -- group metadata values ----------------------------------------------------------------------


RECORD = GroupMetadataRecord(
    protocol_type="consumer", generation=4, protocol="roundrobin", leader="m1",
    current_state_timestamp=1700000000123,
    members=(
        MemberRecord("m1", None, "client-a", "/127.0.0.1", 300000, 45000, b"\x00\x01sub", b"asg1"),
        MemberRecord("m2", "inst-2", "client-b", "/127.0.0.2", 60000, 10000, b"", b""),
    ),
)


def test_group_metadata_value_v3_read_by_spec_reader():
    out = spec_read_group_metadata_v3(encode_group_metadata_value(RECORD))
    assert out["version"] == 3
    assert (out["protocol_type"], out["generation"], out["protocol"], out["leader"]) == (
        "consumer", 4, "roundrobin", "m1")
    assert out["current_state_timestamp"] == 1700000000123
    assert out["members"][0] == {
        "member_id": "m1", "group_instance_id": None, "client_id": "client-a",
        "client_host": "/127.0.0.1", "rebalance_timeout": 300000, "session_timeout": 45000,
        "subscription": b"\x00\x01sub", "assignment": b"asg1",
    }
    assert out["members"][1]["group_instance_id"] == "inst-2"
    assert decode_group_metadata_value(encode_group_metadata_value(RECORD)) == RECORD


def test_empty_group_metadata_has_null_protocol_and_leader():
    empty = GroupMetadataRecord("consumer", 5, None, None, 10, ())
    out = spec_read_group_metadata_v3(encode_group_metadata_value(empty))
    assert out["protocol"] is None and out["leader"] is None and out["members"] == []
    assert decode_group_metadata_value(encode_group_metadata_value(empty)) == empty


def test_group_metadata_value_v0_decodes():
    v0 = (struct.pack(">h", 0) + b"\x00\x08consumer" + struct.pack(">i", 2) + b"\x00\x05range"
          + b"\x00\x02m1" + struct.pack(">i", 1)
          + b"\x00\x02m1" + b"\x00\x01c" + b"\x00\x01h" + struct.pack(">i", 30000)
          + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a")
    rec = decode_group_metadata_value(v0)
    assert rec.generation == 2 and rec.protocol == "range" and rec.current_state_timestamp == -1
    assert rec.members == (MemberRecord("m1", None, "c", "h", 30000, 30000, b"s", b"a"),)


@pytest.mark.parametrize("bad", [
    b"",                                       # no version
    b"\x00\x03",                               # truncated after the version
    b"\x00\x03\x00\x08consumer\x00\x00\x00\x01\xff\xff\xff\xff" + b"\x00" * 8 + b"\x7f\xff\xff\xff",
    b"\x00\x09\x00\x00",                       # unknown version
    b"\x00\x03\x00\x02\xff\xfe",               # not UTF-8
])
def test_malformed_group_metadata_value_raises_precise_error(bad):
    with pytest.raises(OffsetsRecordError):
        decode_group_metadata_value(bad)


def test_trailing_bytes_are_rejected():
    with pytest.raises(OffsetsRecordError, match="trailing"):
        decode_offset_commit_value(encode_offset_commit_value(OffsetAndMetadata(1)) + b"\x00")
    with pytest.raises(OffsetsRecordError):
        decode_key(encode_group_metadata_key("g") + b"x")
