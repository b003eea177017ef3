"""Keeps the target's topics in step with the source: remote topics created with the
source's partition count and settings, partitions added when the source grows, and
changed settings copied (MM2's MirrorSourceConnector topic and config sync).

Only the settings a source topic sets itself (DescribeConfigs source
DYNAMIC_TOPIC_CONFIG) are copied; broker defaults stay the target's own. A few settings
describe the source cluster rather than the data and are never copied (MM2's
DefaultConfigPropertyFilter keeps out the same ones).

Both clusters are asked through pykfk's admin client (pykfk/client/admin.py), the one the
``pykfk`` command uses; its errors are pykfk.errors.KafkaError (ConnectionError_ when a
cluster does not answer), which health.unreachable tells apart from refusals.
"""

from __future__ import annotations

import logging

from pykfk.client.admin import CONFIG_SET, RESOURCE_TOPIC, AdminClient
from pykfk.errors import ErrorCode, KafkaError
from pykfk.mirror.config import MirrorConfig
from pykfk.mirror.naming import ReplicationPolicy

__all__ = ["ADMIN_TIMEOUT_S", "EXCLUDED_CONFIGS", "TopicSync", "describe_topic_configs"]

log = logging.getLogger("pykfk.mirror")

EXCLUDED_CONFIGS = frozenset({
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
    "message.timestamp.difference.max.ms",
    "message.timestamp.type",
    "unclean.leader.election.enable",
    "min.insync.replicas",
})

# Seconds any one admin call may take before the sync gives up until its next round.
ADMIN_TIMEOUT_S = 10
# Kafka's default message.max.bytes, for a target that does not report the setting.
KAFKA_MAX_MESSAGE_BYTES = 1048588
# Answers that only say the thing already exists or is already so.
_ALREADY = frozenset({ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.INVALID_PARTITIONS})


class TopicSync:
    """Admin work on both clusters for one mirror process. Not thread-safe: the mirror's
    main loop calls it between batches."""

    def __init__(self, config: MirrorConfig, policy: ReplicationPolicy):
        self.config = config
        self.policy = policy
        self.source_admin = config.source.admin_client(ADMIN_TIMEOUT_S)
        self.target_admin = config.target.admin_client(ADMIN_TIMEOUT_S)
        self.target_partitions: dict[str, int] = {}  # remote topic -> partition count
        self._max_message_bytes: dict[str, int] = {}  # remote topic -> its limit

    # ------------------------------------------------------------------ listing

    def source_partitions(self) -> dict[str, int]:
        """Every source topic the mirror copies, with its partition count."""
        return {
            name: count
            for name, count in self.source_admin.partition_counts().items()
            if self.config.matches(name) and not self.policy.is_cycle(name)
        }

    def source_partition_count(self, topic: str) -> int:
        """Partitions of one source topic (a leader being elected is waited for)."""
        return len(self.source_admin.topic(topic).partitions)

    def refresh_target(self) -> None:
        self.target_partitions = self.target_admin.partition_counts()

    # ------------------------------------------------------------------ syncing

    def sync(self, source: dict[str, int]) -> None:
        """Create, extend and reconfigure the remote topic of each source topic."""
        self.refresh_target()
        for topic, partitions in sorted(source.items()):
            self.sync_topic(topic, partitions)

    def sync_topic(self, topic: str, partitions: int) -> None:
        remote = self.policy.remote_topic(topic)
        configs = self.source_configs(topic) if self.config.sync_topic_configs else {}
        have = self.target_partitions.get(remote)
        if have is None:
            self._create(remote, partitions, configs)
            return
        if have < partitions:
            self._grow(remote, partitions)
        if configs:
            self._align_configs(remote, configs)

    def ensure_internal(self, name: str) -> None:
        """A compacted single-partition topic in the target for the mirror's own state."""
        if name not in self.target_partitions:
            self._create(name, 1, {"cleanup.policy": "compact"})

    def source_configs(self, topic: str) -> dict[str, str]:
        return {name: value for name, value in describe_topic_configs(self.source_admin, topic).items()
                if name not in EXCLUDED_CONFIGS}

    def max_message_bytes(self, remote: str) -> int:
        """The largest record batch the remote topic takes (its max.message.bytes, the
        broker default included); read once per topic and process."""
        if remote not in self._max_message_bytes:
            entries = self.target_admin.describe_configs(RESOURCE_TOPIC, remote, ["max.message.bytes"])
            value = next((e.value for e in entries if e.name == "max.message.bytes"), None)
            self._max_message_bytes[remote] = int(value) if value else KAFKA_MAX_MESSAGE_BYTES
        return self._max_message_bytes[remote]

    def _create(self, remote: str, partitions: int, configs: dict[str, str]) -> None:
        try:
            self.target_admin.create_topic(remote, partitions, self.config.replication_factor, configs)
            log.info("created %s (%d partitions) %s", remote, partitions, configs or "")
        except KafkaError as exc:
            if exc.code not in _ALREADY:
                raise
        self.target_partitions[remote] = partitions

    def _grow(self, remote: str, partitions: int) -> None:
        try:
            self.target_admin.create_partitions(remote, partitions)
            log.info("%s now has %d partitions", remote, partitions)
        except KafkaError as exc:
            if exc.code not in _ALREADY:
                raise
        self.target_partitions[remote] = partitions

    def _align_configs(self, remote: str, wanted: dict[str, str]) -> None:
        current = {e.name: e.value for e in self.target_admin.describe_configs(RESOURCE_TOPIC, remote)}
        changes = [(name, value) for name, value in sorted(wanted.items()) if current.get(name) != value]
        if not changes:
            return
        self.target_admin.alter_configs(RESOURCE_TOPIC, remote,
                                        [(name, CONFIG_SET, value) for name, value in changes])
        log.info("%s settings now %s", remote, dict(changes))

    def close(self) -> None:
        self.source_admin.close()
        self.target_admin.close()


def describe_topic_configs(admin: AdminClient, topic: str) -> dict[str, str]:
    """The settings ``topic`` sets itself (DescribeConfigs source DYNAMIC_TOPIC_CONFIG)."""
    return {entry.name: entry.value for entry in admin.describe_configs(RESOURCE_TOPIC, topic)
            if entry.source == "DYNAMIC_TOPIC_CONFIG" and entry.value is not None}
