"""Topic lifecycle requests (CreateTopics, DeleteTopics, CreatePartitions, Metadata
auto-creation): Kafka's checks, then the change through the metadata store.

The store applies a change and its listeners create or delete the logs (the replica
manager follows the store), so a topic is created the same way on a standalone broker
and in a ZooKeeper cluster; only the store's wait differs (the embedded store applies a
change before returning, ZooKeeper's waits for the controller to elect leaders).
"""

from __future__ import annotations

import logging
import math
import os
import resource
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pykfk._core.segment import open_sealed_segments, open_sealed_segments_limit
from pykfk.cluster.metadata import ClusterView, TopicExistsError, TopicInfo, UnknownTopicError
from pykfk.config import ConfigError, validate_topic_configs
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log.naming import topic_name_error

if TYPE_CHECKING:
    from pykfk.config import BrokerConfig
    from pykfk.log.config import LogConfig

log = logging.getLogger("pykfk.cluster")

# The internal topic of committed offsets and group metadata (pykfk.group.OFFSETS_TOPIC).
OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's state (pykfk.txn.TRANSACTION_STATE_TOPIC).
TRANSACTION_STATE_TOPIC = "__transaction_state"
# Share groups' delivery state (pykfk.group.share.state_records.SHARE_STATE_TOPIC).
SHARE_STATE_TOPIC = "__share_group_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, SHARE_STATE_TOPIC})
# Upper bound per topic: a single request must not be able to create millions of
# directories and open files on this broker.
MAX_PARTITIONS_PER_TOPIC = 10000
# Files a new partition keeps open on a broker holding it: its active segment's .log
# (indexes are mappings without descriptors; sealed segments share a bounded LRU).
FILES_PER_NEW_PARTITION = 1
# Open files left for connections, the checkpoints and ZooKeeper when deciding whether new partitions fit under the limit.
RESERVED_FILES = 256


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


class TopicManager:
    """Checks and applies topic changes. Loop-affine."""

    def __init__(
        self,
        config: BrokerConfig,
        store: ClusterView,
        default_log_config: LogConfig,
        partitions_created: Callable[[str], Awaitable[None]] | None = None,
        placement_problem: Callable[[], str | None] | None = None,
    ):
        """``partitions_created(topic)`` waits until this broker's replicas of a topic's
        new partitions exist (the replica manager may create many in the background;
        KafkaError when some could not be made); ``placement_problem()`` says why this
        broker's log dirs can take no new partition (all offline or full), or None."""
        self.config = config
        self.store = store
        self.default_log_config = default_log_config
        self.partitions_created = partitions_created or _nothing_to_wait_for
        self.placement_problem = placement_problem or (lambda: None)

    def check_new_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None],
    ) -> tuple[int, int, dict[str, str]]:
        """Validate a topic creation the way Kafka's CreateTopics does. Returns the
        effective (partitions, replication factor, configs); raises KafkaError."""
        problem = topic_name_error(name)
        if problem:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, problem)
        if self.store.get_topic(name) is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        collision = self._colliding_topic(name)
        if collision:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {collision}",
            )
        partitions = self.config.num_partitions if num_partitions == -1 else num_partitions
        if partitions <= 0:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        _check_partition_limit(partitions)
        replication = self.config.default_replication_factor if replication_factor == -1 else replication_factor
        if replication <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        brokers = len(self.store.brokers())
        if replication > brokers:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication} larger than available brokers: {brokers}.",
            )
        self.validate_topic_configs(configs)
        self._check_open_files(partitions, replication)
        self._check_placement()
        return partitions, replication, {k: v for k, v in configs.items() if v is not None}

    def _check_placement(self) -> None:
        """KAFKA_STORAGE_ERROR when a cluster of one has no log dir that can take a new
        partition (in a larger cluster the other brokers may)."""
        if len(self.store.brokers()) > 1:
            return
        problem = self.placement_problem()
        if problem is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, problem)

    def _check_open_files(self, partitions: int, replication: int) -> None:
        """INVALID_PARTITIONS when this broker's share of the new replicas would need more
        open files than its limit allows: refused now, not failing fetches later."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        try:
            in_use = len(os.listdir("/proc/self/fd"))
        except OSError:
            return  # no count of open files on this platform
        here = math.ceil(partitions * replication / max(len(self.store.brokers()), 1))
        lru_headroom = max(open_sealed_segments_limit() - open_sealed_segments(), 0)
        needed = in_use + FILES_PER_NEW_PARTITION * here + RESERVED_FILES + lru_headroom
        if needed > soft:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"{here} new partition replicas on broker {self.config.broker_id} would need about "
                f"{needed} open files; its limit is {soft} (raise it with ulimit -n).",
            )

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> None:
        """Raise KafkaError(INVALID_CONFIG) naming the first bad per-topic setting."""
        try:
            validate_topic_configs(configs)
            self.default_log_config.with_overrides({k: v for k, v in configs.items() if v is not None})
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid config {exc.key}: {exc.message}") from None
        except ValueError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid config: {exc}") from None

    def _colliding_topic(self, name: str) -> str | None:
        # '.' and '_' collide in metric names, so Kafka refuses names differing only there.
        normalized = name.replace(".", "_")
        for existing in self.store.topics():
            if existing != name and existing.replace(".", "_") == normalized:
                return existing
        return None

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str],
        *, assignment: Mapping[int, Sequence[int]] | None = None,
    ) -> TopicInfo:
        """Create a checked topic, its replicas where ``assignment`` puts them if given;
        its logs exist on this broker once it returns (the store's listeners create them)."""
        try:
            info = await self.store.create_topic(name, partitions, replication_factor, configs,
                                                 assignment=assignment)
        except TopicExistsError:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None
        try:
            await self.partitions_created(name)
        except KafkaError as exc:
            # Some of this broker's replicas have no log: the topic goes whole.
            log.warning("creating topic %s failed, deleting it again: %s", name, exc.message)
            try:
                await self.store.delete_topic(name)
            except (KafkaError, UnknownTopicError) as undo:
                log.warning("deleting the half-made topic %s failed: %s", name, undo)
            raise
        log.info("created topic %s with %d partitions%s", name, partitions, f", configs {dict(configs)}" if configs else "")
        return info

    async def alter_topic_configs(self, name: str, configs: Mapping[str, str], *, validate_only: bool = False) -> None:
        """Replace a topic's overrides with ``configs`` (checked like CreateTopics'); the
        store's listeners hand the new settings to the topic's logs. Raises KafkaError."""
        if self.store.get_topic(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        self.validate_topic_configs(configs)
        if not validate_only:
            try:
                await self.store.alter_topic_configs(name, dict(configs))
            except UnknownTopicError:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist") from None
            log.info("topic %s configs now %s", name, dict(configs))

    async def auto_create(self, name: str) -> TopicInfo:
        """Metadata auto-creation with the broker defaults; raises KafkaError."""
        partitions, replication, configs = self.check_new_topic(name, -1, -1, {})
        return await self.create_topic(name, partitions, replication, configs)

    async def delete_topic(self, name: str) -> None:
        if self.store.get_topic(name) is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        _refuse_internal(name, "deleted")
        try:
            await self.store.delete_topic(name)
        except UnknownTopicError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist") from None
        log.info("deleted topic %s", name)

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        info = self.store.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        _refuse_internal(name, "given more partitions")
        if total <= info.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {info.partitions} partitions, which is higher than "
                f"or equal to the requested {total}.",
            )
        _check_partition_limit(total)
        self._check_open_files(total - info.partitions, info.replication_factor)
        self._check_placement()
        if validate_only:
            return
        try:
            await self.store.create_partitions(name, total)
        except UnknownTopicError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist") from None
        await self.partitions_created(name)
        log.info("topic %s now has %d partitions", name, total)


async def _nothing_to_wait_for(_topic: str) -> None:
    return None


def _check_partition_limit(partitions: int) -> None:
    if partitions > MAX_PARTITIONS_PER_TOPIC:
        raise KafkaError(
            ErrorCode.INVALID_PARTITIONS,
            f"Number of partitions {partitions} exceeds this broker's limit of {MAX_PARTITIONS_PER_TOPIC}.",
        )


def _refuse_internal(name: str, change: str) -> None:
    # The loaded coordinator owns __consumer_offsets: deleting it would drop every
    # committed offset, and more partitions would move groups to other partitions.
    # (Kafka's topic tool refuses deletion too; its broker relies on that.)
    if is_internal_topic(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic {name} is internal and cannot be {change}.")
