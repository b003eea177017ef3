"""Consumer-group offset translation (MM2's MirrorCheckpointConnector, KIP-382).

Every ``emit.checkpoints.interval.ms`` each mirror process reads the committed offsets
of the source's consumer groups (``groups`` / ``groups.exclude``) for the partitions it
copies, maps each to a target offset with its offset syncs (progress.py) and writes a
checkpoint to ``<source>.checkpoints.internal`` in the target (compacted, one partition):

    key    JSON ["<group>", "<source topic>", <partition>]
    value  JSON {"upstream_offset": <committed in the source>,
                 "downstream_topic": "<remote topic>", "downstream_offset": <target offset>,
                 "time": <ms>}

A group moved to the target starts at ``downstream_offset``: no record at or after its
source offset is skipped, and what it reads again is at most the records copied between
the sync used and its committed offset (one progress interval of copying), plus any
duplicates the at-least-once copy left there. ``apply_checkpoints`` commits them to the
group in the target (``pykfk-mirror failover``).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer

from pykfk.client.admin import AdminClient
from pykfk.errors import KafkaError
from pykfk.mirror.config import ClientConfig, MirrorConfig
from pykfk.mirror.errors import MirrorError
from pykfk.mirror.progress import OffsetSyncs, read_compacted

__all__ = ["Checkpoint", "Checkpointer", "apply_checkpoints", "read_checkpoints"]

log = logging.getLogger("pykfk.mirror")

ADMIN_TIMEOUT_S = 10


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_topic: str
    downstream_offset: int

    def key(self) -> bytes:
        return json.dumps([self.group, self.topic, self.partition]).encode()

    def encode(self) -> bytes:
        return json.dumps({
            "upstream_offset": self.upstream_offset, "downstream_topic": self.downstream_topic,
            "downstream_offset": self.downstream_offset, "time": int(time.time() * 1000),
        }).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        group, topic, partition = json.loads(key)
        doc = json.loads(value)
        return cls(str(group), str(topic), int(partition), int(doc["upstream_offset"]),
                   str(doc["downstream_topic"]), int(doc["downstream_offset"]))


class Checkpointer:
    """Translates and writes checkpoints for the partitions one mirror process owns."""

    def __init__(self, config: MirrorConfig, source_admin: AdminClient):
        self.config = config
        self.admin = source_admin
        self.last: dict[tuple[str, str, int], int] = {}  # what was written, to skip repeats

    def groups(self) -> list[str]:
        """The source's groups to translate (of the brokers that answered)."""
        names = (g["group"] for g in self.admin.list_groups(answered_only=True))
        return sorted(
            name for name in names
            if re.fullmatch(self.config.groups_regex, name)
            and not re.fullmatch(self.config.groups_exclude, name)
            and name != self.config.group_id
        )

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return self.admin.committed_offsets(group)

    def emit(self, producer: Any, syncs: dict[tuple[str, int], OffsetSyncs],
             remote_topic: Callable[[str], str]) -> int:
        """Queue checkpoints on ``producer`` (the caller flushes); returns how many."""
        written = 0
        for group in self.groups():
            for (topic, partition), offset in self.committed(group).items():
                partition_syncs = syncs.get((topic, partition))
                if partition_syncs is None:
                    continue  # not copied by this process (or not same-partition)
                downstream = partition_syncs.translate(offset)
                if downstream is None or self.last.get((group, topic, partition)) == offset:
                    continue
                checkpoint = Checkpoint(group, topic, partition, offset, remote_topic(topic), downstream)
                producer.produce(self.config.checkpoints_topic, checkpoint.encode(), checkpoint.key())
                self.last[(group, topic, partition)] = offset
                written += 1
        return written


def read_checkpoints(consumer_config: ClientConfig, topic: str) -> dict[tuple[str, str, int], Checkpoint]:
    """The latest checkpoint per (group, source topic, partition) in ``topic``."""
    consumer = Consumer({**consumer_config, "group.id": "pykfk-mirror-checkpoint-reader",
                         "enable.auto.commit": False})
    try:
        latest: dict[tuple[str, str, int], Checkpoint] = {}
        for message in read_compacted(consumer, topic):
            key, value = message.key(), message.value()
            if key is None or value is None:
                continue
            checkpoint = Checkpoint.decode(key, value)
            latest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
        return latest
    finally:
        consumer.close()


def apply_checkpoints(config: MirrorConfig, group: str, *, execute: bool) -> list[Checkpoint]:
    """The group's checkpoints; with ``execute`` also committed to ``group`` in the
    target (it must have no active members there, as with any offset reset)."""
    checkpoints = [c for (g, _, _), c in sorted(read_checkpoints(
        config.target.client("consumer"), config.checkpoints_topic).items()) if g == group]
    if execute and checkpoints:
        offsets = {(c.downstream_topic, c.partition): c.downstream_offset for c in checkpoints}
        with config.target.admin_client(ADMIN_TIMEOUT_S) as admin:
            try:
                admin.commit_offsets(group, offsets)
            except KafkaError as exc:
                raise MirrorError(f"committing offsets of {group}: {exc}") from None
    return checkpoints
