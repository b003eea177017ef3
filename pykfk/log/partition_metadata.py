"""The ``partition.metadata`` file of a partition directory (KIP-516), as Kafka writes it::

    version: 0
    topic_id: <the topic's UUID, URL-safe base64 without padding (22 characters)>

It ties the directory to one topic: a directory left from a deleted topic of the same
name (the broker was down while the topic was deleted and made again) carries the old id,
so its records are never served as the new topic's.
"""

from __future__ import annotations

import base64
import os
import uuid

from pykfk.log.checkpoints import write_atomic

FILE_NAME = "partition.metadata"
VERSION = 0


def encode_topic_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def write_partition_metadata(partition_dir: str, topic_id: uuid.UUID) -> None:
    """Unsynced, as the leader epoch file of a new partition: a lost file is written
    again when the partition is next opened."""
    text = f"version: {VERSION}\ntopic_id: {encode_topic_id(topic_id)}\n"
    write_atomic(os.path.join(partition_dir, FILE_NAME), text.encode("ascii"), sync=False)


def read_partition_metadata(partition_dir: str) -> uuid.UUID | None:
    """The topic id the directory belongs to; None when there is no (readable) file."""
    try:
        with open(os.path.join(partition_dir, FILE_NAME), encoding="ascii") as f:
            fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
        raw = fields["topic_id"].strip()
        return uuid.UUID(bytes=base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (OSError, KeyError, ValueError, UnicodeDecodeError):
        return None
