"""Keeps the target's topics in step with the source: remote topics created with the
source's partition count and settings, partitions added when the source grows, and
changed settings copied (MM2's MirrorSourceConnector topic and config sync).

Only the settings a source topic sets itself (DescribeConfigs source
DYNAMIC_TOPIC_CONFIG) are copied; broker defaults stay the target's own. A few settings
describe the source cluster rather than the data and are never copied (MM2's
DefaultConfigPropertyFilter keeps out the same ones).
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

# The config and resource classes by their defining modules: confluent_kafka.admin
# re-exports them without declaring so, which strict type checking does not accept.
from confluent_kafka.admin._config import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from confluent_kafka.admin._resource import ResourceType
from confluent_kafka.cimpl import NewPartitions, NewTopic

from pykfk.mirror.config import MirrorConfig
from pykfk.mirror.naming import ReplicationPolicy

__all__ = ["EXCLUDED_CONFIGS", "TopicSync"]

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
# Kafka error code names that only say the thing already exists or is already so.
_ALREADY = ("TOPIC_ALREADY_EXISTS", "INVALID_PARTITIONS")


def _error_name(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return str(error.name()) if isinstance(error, KafkaError) else str(exc)


class TopicSync:
    """Admin work on both clusters for one mirror process. Not thread-safe: the mirror's
    main loop calls it between batches."""

    def __init__(self, config: MirrorConfig, policy: ReplicationPolicy,
                 source_extra: dict[str, Any] | None = None, target_extra: dict[str, Any] | None = None):
        self.config = config
        self.policy = policy
        self.source_admin = AdminClient({**(source_extra or {}), **config.source.client("admin")})
        self.target_admin = AdminClient({**(target_extra or {}), **config.target.client("admin")})
        self.target_partitions: dict[str, int] = {}  # remote topic -> partition count
        self._max_message_bytes: dict[str, int] = {}  # remote topic -> its limit

    # ------------------------------------------------------------------ listing

    def source_partitions(self) -> dict[str, int]:
        """Every source topic the mirror copies, with its partition count."""
        metadata = self.source_admin.list_topics(timeout=ADMIN_TIMEOUT_S)
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None and self.config.matches(name) and not self.policy.is_cycle(name)
        }

    def refresh_target(self) -> None:
        metadata = self.target_admin.list_topics(timeout=ADMIN_TIMEOUT_S)
        self.target_partitions = {
            name: len(topic.partitions) for name, topic in metadata.topics.items() if topic.error is None
        }

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
        resource = ConfigResource(ResourceType.TOPIC, topic)
        entries = self.source_admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
        return {
            name: entry.value
            for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and name not in EXCLUDED_CONFIGS
            and entry.value is not None
        }

    def max_message_bytes(self, remote: str) -> int:
        """The largest record batch the remote topic takes (its max.message.bytes, the
        broker default included); read once per topic and process."""
        if remote not in self._max_message_bytes:
            resource = ConfigResource(ResourceType.TOPIC, remote)
            entries = self.target_admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
            entry = entries.get("max.message.bytes")
            value = entry.value if entry is not None else None
            self._max_message_bytes[remote] = int(value) if value else KAFKA_MAX_MESSAGE_BYTES
        return self._max_message_bytes[remote]

    def _create(self, remote: str, partitions: int, configs: dict[str, str]) -> None:
        new = NewTopic(remote, partitions, self.config.replication_factor, config=configs)
        try:
            self.target_admin.create_topics([new])[remote].result(ADMIN_TIMEOUT_S)
            log.info("created %s (%d partitions) %s", remote, partitions, configs or "")
        except KafkaException as exc:
            if _error_name(exc) not in _ALREADY:
                raise
        self.target_partitions[remote] = partitions

    def _grow(self, remote: str, partitions: int) -> None:
        try:
            self.target_admin.create_partitions([NewPartitions(remote, partitions)])[remote].result(
                ADMIN_TIMEOUT_S
            )
            log.info("%s now has %d partitions", remote, partitions)
        except KafkaException as exc:
            if _error_name(exc) not in _ALREADY:
                raise
        self.target_partitions[remote] = partitions

    def _align_configs(self, remote: str, wanted: dict[str, str]) -> None:
        resource = ConfigResource(ResourceType.TOPIC, remote)
        current = self.target_admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
        changes = [
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in sorted(wanted.items())
            if name not in current or current[name].value != value
        ]
        if not changes:
            return
        change = ConfigResource(ResourceType.TOPIC, remote, incremental_configs=changes)
        self.target_admin.incremental_alter_configs([change])[change].result(ADMIN_TIMEOUT_S)
        log.info("%s settings now %s", remote, {c.name: c.value for c in changes})

    def close(self) -> None:
        """AdminClient has no close; dropping the references ends its threads."""
        self.source_admin = self.target_admin = None  # type: ignore[assignment]


def describe_topic_configs(admin: Any, topic: str) -> dict[str, str]:
    """Non-default settings of ``topic`` (for tests and the failover report)."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    return {
        name: entry.value
        for name, entry in entries.items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }
