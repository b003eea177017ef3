"""Records of ``__share_group_state``: one snapshot per share partition, keyed by
(group, topic id, partition), holding what Kafka's share coordinator keeps in a
ShareSnapshotValue: the state epoch, the share-partition start offset and the state
batches (first and last offset, delivery state, delivery count) of the in-flight
records. The topic is compacted, so the latest snapshot of each key is what stays.

Layout: key = int16 record type 0 (a snapshot), string group (int16 length), 16-byte
topic id, int32 partition; value = int16 version 0, int32 state epoch, int64 start
offset, int32 batch count, then per batch int64 first, int64 last, int8 state, int16
delivery count.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pykfk.group.offsets import partition_for

SHARE_STATE_TOPIC = "__share_group_state"
SHARE_STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
SNAPSHOT_KEY_TYPE = 0

_VALUE_HEAD = struct.Struct(">hiqi")
_BATCH = struct.Struct(">qqbh")
_KEY_TAIL = struct.Struct(">16si")


@dataclass(frozen=True)
class ShareSnapshot:
    state_epoch: int
    start_offset: int
    batches: Sequence[tuple[int, int, int, int]]


def state_partition(group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """The ``__share_group_state`` partition of a share partition, as Kafka's share
    coordinator places it: the hash of ``group:topicId:partition``."""
    return partition_for(f"{group_id}:{topic_id}:{partition}", num_partitions)


def snapshot_key(group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    group = group_id.encode()
    return struct.pack(">hh", SNAPSHOT_KEY_TYPE, len(group)) + group + _KEY_TAIL.pack(topic_id.bytes, partition)


def snapshot_value(snapshot: ShareSnapshot) -> bytes:
    head = _VALUE_HEAD.pack(0, snapshot.state_epoch, snapshot.start_offset, len(snapshot.batches))
    return head + b"".join(_BATCH.pack(*batch) for batch in snapshot.batches)


def decode_snapshot(value: bytes) -> ShareSnapshot | None:
    """The snapshot, or None for a value of a version this broker does not know or
    that is cut short (ignored, as a newer broker's records would be)."""
    if len(value) < _VALUE_HEAD.size:
        return None
    version, state_epoch, start, count = _VALUE_HEAD.unpack_from(value)
    if version != 0 or count < 0 or len(value) != _VALUE_HEAD.size + count * _BATCH.size:
        return None
    batches = [_BATCH.unpack_from(value, _VALUE_HEAD.size + i * _BATCH.size) for i in range(count)]
    return ShareSnapshot(state_epoch, start, batches)


# pykfk's own record in the same topic: a share group's configs (share.auto.offset.reset,
# share.isolation.level), which Kafka keeps in its metadata log. Key: int16 type 100 and
# the group (int16 length); value: "name=value" lines (UTF-8); a tombstone drops them.
GROUP_CONFIG_KEY_TYPE = 100


def group_config_key(group_id: str) -> bytes:
    group = group_id.encode()
    return struct.pack(">hh", GROUP_CONFIG_KEY_TYPE, len(group)) + group


def decode_group_config_key(key: bytes) -> str | None:
    """The group of a group-config key, None for any other key."""
    if len(key) < 4 or struct.unpack_from(">h", key)[0] != GROUP_CONFIG_KEY_TYPE:
        return None
    (length,) = struct.unpack_from(">h", key, 2)
    return key[4:4 + length].decode(errors="replace") if len(key) == 4 + length else None


def group_config_value(configs: dict[str, str]) -> bytes | None:
    return "\n".join(f"{k}={v}" for k, v in sorted(configs.items())).encode() if configs else None


def decode_group_config_value(value: bytes) -> dict[str, str]:
    pairs = (line.partition("=") for line in value.decode(errors="replace").splitlines())
    return {k: v for k, _eq, v in pairs if k}
