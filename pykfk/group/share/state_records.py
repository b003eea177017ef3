"""Records of ``__share_group_state``: one snapshot per share partition, keyed by
(group, topic id, partition), holding what Kafka's share coordinator keeps in a
ShareSnapshotValue: the state epoch, the leader epoch of the share-partition leader that
wrote it, the share-partition start offset and the state batches (first and last
offset, delivery state, delivery count) of the in-flight records. The topic is
compacted, so the latest record of each key is what stays.

The layouts are declared in ``pykfk/protocol/internal.py`` (Kafka's ShareSnapshotKey,
key type 0, and ShareSnapshotValue v0) and read and written by its codec; this module
maps them to the share coordinator's forms.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from pykfk.group.offsets import partition_for
from pykfk.protocol import internal

SHARE_STATE_TOPIC = "__share_group_state"
SHARE_STATE_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}
SNAPSHOT_KEY_TYPE = 0
SNAPSHOT_VALUE_VERSION = 0

StateBatch = tuple[int, int, int, int]  # first offset, last offset, delivery state, delivery count


@dataclass(frozen=True)
class ShareSnapshot:
    state_epoch: int
    start_offset: int
    batches: Sequence[StateBatch]
    leader_epoch: int = -1


def state_partition(group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int) -> int:
    """The ``__share_group_state`` partition of a share partition, as Kafka's share
    coordinator places it: the hash of ``group:topicId:partition``."""
    return partition_for(f"{group_id}:{topic_id}:{partition}", num_partitions)


def snapshot_key(group_id: str, topic_id: uuid.UUID, partition: int) -> bytes:
    return internal.encode(internal.SHARE_SNAPSHOT_KEY, 0,
                           {"group_id": group_id, "topic_id": topic_id, "partition": partition},
                           prefix=SNAPSHOT_KEY_TYPE)


def decode_snapshot_key(key: bytes) -> tuple[str, uuid.UUID, int] | None:
    """(group, topic id, partition) of a snapshot key, None for any other key."""
    try:
        if internal.read_prefix(key, "key type") != SNAPSHOT_KEY_TYPE:
            return None
        found = internal.decode(internal.SHARE_SNAPSHOT_KEY, 0, key)
    except internal.InternalRecordError:
        return None
    return found.group_id, found.topic_id, found.partition


def snapshot_value(snapshot: ShareSnapshot) -> bytes:
    batches = [{"first_offset": f, "last_offset": l, "delivery_state": s, "delivery_count": c}
               for f, l, s, c in snapshot.batches]
    return internal.encode(internal.SHARE_SNAPSHOT_VALUE, SNAPSHOT_VALUE_VERSION, {
        "snapshot_epoch": 0, "state_epoch": snapshot.state_epoch, "leader_epoch": snapshot.leader_epoch,
        "start_offset": snapshot.start_offset, "state_batches": batches}, prefix=SNAPSHOT_VALUE_VERSION)


def decode_snapshot(value: bytes) -> ShareSnapshot | None:
    """The snapshot, or None for a value of a version this broker does not know or
    that does not fit the layout (ignored, as a newer broker's records would be)."""
    try:
        if internal.read_prefix(value, "value version") != SNAPSHOT_VALUE_VERSION:
            return None
        found = internal.decode(internal.SHARE_SNAPSHOT_VALUE, SNAPSHOT_VALUE_VERSION, value)
    except internal.InternalRecordError:
        return None
    batches = [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in found.state_batches]
    return ShareSnapshot(found.state_epoch, found.start_offset, batches, found.leader_epoch)
