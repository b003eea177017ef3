"""The ``pykfk-broker`` entry point and the Broker composition root.

``pykfk-broker [server.properties] [--override key=value ...]`` runs one standalone broker
with embedded metadata (no ZooKeeper): by default on 127.0.0.1:9092 with its data under
``./data``. With ``zookeeper.connect`` set, the broker joins a cluster coordinated through
ZooKeeper instead (``pykfk.cluster.node``: membership, controller, replication), and
SIGTERM first moves its partition leaderships to other brokers (controlled shutdown). SIGTERM or SIGINT stop it cleanly: stop accepting, answer requests already
read, flush, write checkpoints, exit 0 (the next start then skips the recovery scan).

Broker wires config, metadata store, log manager and network server together, and offers
the operations request handlers need (topic lifecycle, log lookup, producer ids, append
notifications), so handlers never touch files or the metadata backend directly.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

# The broker cannot run without the compiled core: importing it here makes a build
# without the extensions fail at once, with pykfk._core's message saying how to build.
import pykfk._core  # noqa: F401
from pykfk.cluster.embedded import EmbeddedMetadataStore
from pykfk.cluster.metadata import BrokerInfo, MetadataStore, TopicInfo
from pykfk.config import (
    BrokerConfig,
    ConfigError,
    format_config_value,
    validate_topic_configs,
)
from pykfk.errors import ErrorCode, KafkaError
from pykfk.server.waiters import AppendWaiters

log = logging.getLogger("pykfk.broker")

# Kafka's Topic.validate: legal characters and the 249-character limit (255 minus room
# for the partition suffix and ".deleted" in directory names).
TOPIC_NAME_MAX_LENGTH = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# The internal topic of committed offsets and group metadata (pykfk.group.OFFSETS_TOPIC).
INTERNAL_OFFSETS_TOPIC = "__consumer_offsets"
# Upper bound per topic: a single request must not be able to create millions of
# directories and open files on this broker.
MAX_PARTITIONS_PER_TOPIC = 10000


def topic_name_error(name: str | None) -> str | None:
    """Why ``name`` is not a legal topic name, or None when it is."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        return f"Topic name is illegal, it can't be longer than {TOPIC_NAME_MAX_LENGTH} characters"
    if not _TOPIC_NAME.fullmatch(name):
        return (
            f"Topic name \"{name}\" is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None


class Broker:
    """One standalone broker. Create, ``await start()``, ``await stop()``; loop-affine."""

    def __init__(self, config: BrokerConfig):
        self.config = config
        self.waiters = AppendWaiters()
        self.metadata: MetadataStore
        self.log_manager: Any = None
        self.server: Any = None
        self.host = ""
        self.port = 0
        self.stopping = False
        self._default_log_config: Any = None
        self.group_coordinator: Any = None
        # Cluster mode (zookeeper.connect): pykfk.cluster.node.ClusterNode, else None.
        self.cluster: Any = None

    @property
    def replica_manager(self) -> Any:
        """Leaders, followers and the ISR in cluster mode; None for a standalone broker."""
        return self.cluster.replica_manager if self.cluster is not None else None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        from pykfk.log import LogConfig, LogManager
        from pykfk.server.connection import KafkaServer
        from pykfk.server.dispatch import Dispatcher, Registry

        cfg = self.config
        loop = asyncio.get_running_loop()
        for directory in cfg.log_dirs:
            os.makedirs(directory, exist_ok=True)
        advertised = cfg.advertised_listeners[0]
        if cfg.zookeeper_connect:
            from pykfk.cluster.node import ClusterNode

            self.cluster = ClusterNode(self)
            self.metadata = store = await self.cluster.connect()
        else:
            self.metadata = store = EmbeddedMetadataStore(
                cfg.log_dirs[0], BrokerInfo(cfg.broker_id, advertised.host or "127.0.0.1", advertised.port)
            )
        self._default_log_config = LogConfig.from_properties(_as_strings(cfg.topic_defaults()))
        flush_check_ms = (
            cfg["log.flush.scheduler.interval.ms"] if cfg.is_explicit("log.flush.scheduler.interval.ms") else 1000
        )
        self.log_manager = LogManager(
            cfg.log_dirs,
            self._default_log_config,
            broker_id=cfg.broker_id,
            cluster_id=store.cluster_id,
            config_for=self._log_config_for_name,
            retention_check_interval_ms=cfg.log_retention_check_interval_ms,
            flush_check_interval_ms=flush_check_ms,
            cleaner_enable=cfg["log.cleaner.enable"],
            cleaner_backoff_ms=cfg["log.cleaner.backoff.ms"],
            cleaner_dedupe_buffer_size=cfg["log.cleaner.dedupe.buffer.size"],
            # Followers and new leaders start from the checkpointed high watermark.
            **({"checkpoint_interval_ms": cfg["replica.high.watermark.checkpoint.interval.ms"]} if self.cluster else {}),
        )
        # Recovery after an unclean stop can take a while: keep the loop free meanwhile.
        await loop.run_in_executor(None, self.log_manager.open)
        for topic in store.topics().values() if self.cluster is None else ():
            for partition in range(topic.partitions):
                if self.log_manager.get_log(topic.name, partition) is None:
                    self.log_manager.create_log(topic.name, partition, self.log_config_for(topic))
        self.log_manager.start(loop)
        await self._start_group_coordinator()

        self.server = KafkaServer(
            Dispatcher(self, Registry.default()),
            max_request_bytes=cfg.socket_request_max_bytes,
            idle_ms=cfg.connections_max_idle_ms,
            max_in_flight=cfg.queued_max_requests,
        )
        listener = cfg.listeners[0]
        self.host, self.port = await self.server.start(listener.host, listener.port)
        if self.cluster is not None:
            await self.cluster.join()
        elif advertised.port == 0 or not advertised.host:
            store.set_broker(  # type: ignore[attr-defined]
                BrokerInfo(cfg.broker_id, advertised.host or self.host, advertised.port or self.port)
            )
        broker_info = self.cluster.store.broker if self.cluster is not None else store.brokers()[0]
        log.info(
            "broker %d started: listening on %s:%d, advertised as %s:%d, log dirs %s, cluster id %s",
            cfg.broker_id,
            self.host,
            self.port,
            broker_info.host,
            broker_info.port,
            ",".join(cfg.log_dirs),
            store.cluster_id,
        )

    async def stop(self) -> None:
        """Stop accepting, answer in-flight requests, flush and checkpoint the logs."""
        if self.stopping:
            return
        self.stopping = True
        log.info("broker %d shutting down", self.config.broker_id)
        if self.cluster is not None:
            await self.cluster.controlled_shutdown()
        self.waiters.wake_all()
        if self.group_coordinator is not None:
            # Parked JoinGroup/SyncGroup calls answer NOT_COORDINATOR while the server
            # can still send them; pending offset writes finish before the logs close.
            await self.group_coordinator.shutdown()
        if self.server is not None:
            await self.server.shutdown()
        if self.cluster is not None:
            await self.cluster.stop()
        if self.log_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        if getattr(self, "metadata", None) is not None:
            self.metadata.close()
        if self.cluster is not None:
            self.cluster.close()
        log.info("broker %d stopped", self.config.broker_id)

    async def _start_group_coordinator(self) -> None:
        """Start the coordinator; load ``__consumer_offsets`` if it exists (a standalone
        broker leads every partition of it, so it coordinates every group)."""
        from pykfk.group import OFFSETS_TOPIC, GroupConfig, GroupCoordinator

        props = self.config.group_properties()
        info = self.metadata.get_topic(OFFSETS_TOPIC)
        if info is not None:
            # As in Kafka, an existing topic's partition count wins over the setting: the
            # group -> partition mapping must not move under committed offsets.
            props["offsets.topic.num.partitions"] = info.partitions
        self.group_coordinator = GroupCoordinator(
            GroupConfig.from_properties(props), partition_exists=self.partition_exists
        )
        await self.group_coordinator.start()
        if info is not None:
            await self.load_offsets_topic()

    async def load_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (Kafka does so on the first
        FindCoordinator) and load every partition of it; cheap once done."""
        from pykfk.config import TOPIC_KEYS
        from pykfk.group import OFFSETS_TOPIC, OFFSETS_TOPIC_CONFIG, LogOffsetsLog

        coordinator = self.group_coordinator
        if self.cluster is not None:
            # Partitions are loaded where they are led (ClusterNode follows leadership).
            configs = {k: str(v) for k, v in OFFSETS_TOPIC_CONFIG.items() if k in TOPIC_KEYS}
            await self.cluster.ensure_offsets_topic(coordinator.config.offsets_topic_num_partitions, configs)
            return
        info = self.metadata.get_topic(OFFSETS_TOPIC)
        if info is None:
            configs = {k: str(v) for k, v in OFFSETS_TOPIC_CONFIG.items() if k in TOPIC_KEYS}
            partitions = coordinator.config.offsets_topic_num_partitions
            info = self.create_topic_now(OFFSETS_TOPIC, partitions, 1, configs)
        if len(coordinator.owned_partitions) == info.partitions:
            return
        self._create_logs(info, 0)
        for partition in range(info.partitions):
            await coordinator.load_partition(partition, LogOffsetsLog(self.get_log(OFFSETS_TOPIC, partition)))

    # -- services for handlers -------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    def get_log(self, topic: str, partition: int) -> Any:
        """The partition's Log, or None when this broker has no such partition."""
        return self.log_manager.get_log(topic, partition)

    def partition_exists(self, topic: str, partition: int) -> bool:
        info = self.metadata.get_topic(topic)
        return info is not None and 0 <= partition < info.partitions

    def coordinator_node(self, offsets_partition: int) -> tuple[int, str, int] | None:
        """(node id, host, port) of the leader of a ``__consumer_offsets`` partition:
        this broker, as the advertised listener gives it (its current leader in a cluster)."""
        if self.cluster is not None:
            return self.cluster.leader_node(INTERNAL_OFFSETS_TOPIC, offsets_partition)
        info = self.metadata.brokers()[0]
        return info.node_id, info.host, info.port

    @staticmethod
    def is_internal_topic(name: str) -> bool:
        return name == INTERNAL_OFFSETS_TOPIC

    def log_config_for(self, topic: TopicInfo) -> Any:
        return self._default_log_config.with_overrides(topic.configs)

    def _log_config_for_name(self, name: str) -> Any:
        info = self.metadata.get_topic(name)
        return self._default_log_config if info is None else self.log_config_for(info)

    def appended(self, topic: str, partition: int) -> None:
        """Wake fetches long-polling on (topic, partition)."""
        self.waiters.notify(topic, partition)

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
        if self.metadata.get_topic(name) is not None:
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
        if partitions > MAX_PARTITIONS_PER_TOPIC:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions {partitions} exceeds this broker's limit of {MAX_PARTITIONS_PER_TOPIC}.",
            )
        replication = self.config.default_replication_factor if replication_factor == -1 else replication_factor
        if replication <= 0:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
        brokers = len(self.metadata.brokers())
        if replication > brokers:
            raise KafkaError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Replication factor: {replication} larger than available brokers: {brokers}.",
            )
        given = {k: v for k, v in configs.items()}
        self.validate_topic_configs(given)
        return partitions, replication, {k: v for k, v in given.items() if v is not None}

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> None:
        """Raise KafkaError(INVALID_CONFIG) naming the first bad per-topic setting."""
        try:
            validate_topic_configs(configs)
            self._default_log_config.with_overrides({k: v for k, v in configs.items() if v is not None})
        except ConfigError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid config {exc.key}: {exc.message}") from None
        except ValueError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid config: {exc}") from None

    def _colliding_topic(self, name: str) -> str | None:
        # '.' and '_' collide in metric names, so Kafka refuses names differing only there.
        normalized = name.replace(".", "_")
        for existing in self.metadata.topics():
            if existing != name and existing.replace(".", "_") == normalized:
                return existing
        return None

    def create_topic_now(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        """Create a checked topic and its logs without waiting (embedded metadata)."""
        info = self.metadata.create_topic_now(name, partitions, replication_factor, configs)  # type: ignore[attr-defined]
        self._create_logs(info, 0)
        log.info("created topic %s with %d partitions%s", name, partitions, f", configs {dict(configs)}" if configs else "")
        return info

    async def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> TopicInfo:
        if self.cluster is not None:
            # The controller elects leaders; replicas create their logs when they see them.
            return await self.cluster.create_topic(name, partitions, replication_factor, configs)
        info = await self.metadata.create_topic(name, partitions, replication_factor, configs)
        self._create_logs(info, 0)
        log.info("created topic %s with %d partitions%s", name, partitions, f", configs {dict(configs)}" if configs else "")
        return info

    def auto_create_topic(self, name: str) -> TopicInfo:
        """Metadata auto-creation with the broker defaults; raises KafkaError."""
        partitions, replication, configs = self.check_new_topic(name, -1, -1, {})
        return self.create_topic_now(name, partitions, replication, configs)

    async def auto_create(self, name: str) -> TopicInfo:
        """``auto_create_topic`` for either metadata backend."""
        if self.cluster is None:
            return self.auto_create_topic(name)
        partitions, replication, configs = self.check_new_topic(name, -1, -1, {})
        return await self.create_topic(name, partitions, replication, configs)

    def _create_logs(self, info: TopicInfo, first_partition: int) -> None:
        config = self.log_config_for(info)
        for partition in range(first_partition, info.partitions):
            if self.log_manager.get_log(info.name, partition) is None:
                self.log_manager.create_log(info.name, partition, config)

    async def delete_topic(self, name: str) -> None:
        info = self.metadata.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        self._refuse_internal(name, "deleted")
        if self.cluster is not None:
            await self.cluster.delete_topic(name)  # replicas delete their logs
            log.info("deleted topic %s", name)
            return
        await self.metadata.delete_topic(name)
        for partition in range(info.partitions):
            self.log_manager.delete_log(name, partition)
            self.waiters.notify(name, partition)
        log.info("deleted topic %s", name)

    async def create_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        info = self.metadata.get_topic(name)
        if info is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist")
        self._refuse_internal(name, "given more partitions")
        if total <= info.partitions:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {info.partitions} partitions, which is higher than "
                f"or equal to the requested {total}.",
            )
        if total > MAX_PARTITIONS_PER_TOPIC:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Number of partitions {total} exceeds this broker's limit of {MAX_PARTITIONS_PER_TOPIC}.",
            )
        if validate_only:
            return
        if self.cluster is not None:
            await self.cluster.create_partitions(name, total)
            log.info("topic %s now has %d partitions", name, total)
            return
        new_info = await self.metadata.create_partitions(name, total)
        self._create_logs(new_info, info.partitions)
        log.info("topic %s now has %d partitions", name, total)

    def _refuse_internal(self, name: str, change: str) -> None:
        # The loaded coordinator owns __consumer_offsets: deleting it would drop every
        # committed offset, and more partitions would move groups to other partitions.
        # (Kafka's topic tool refuses deletion too; its broker relies on that.)
        if self.is_internal_topic(name):
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION, f"Topic {name} is internal and cannot be {change}."
            )

    async def allocate_producer_id(self) -> int:
        return await self.metadata.allocate_producer_id()


def _as_strings(props: Mapping[str, Any]) -> dict[str, str]:
    return {k: s for k, v in props.items() if (s := format_config_value(v)) is not None}


# ---------------------------------------------------------------------------------------
# Command line


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="pykfk-broker",
        description="Run a pykfk broker (Kafka protocol): standalone with embedded metadata, "
        "or a member of a cluster when zookeeper.connect is set.",
    )
    parser.add_argument("config", nargs="?", help="a server.properties file (Kafka's names)")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a property, taking precedence over the file (repeatable)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging threshold (default INFO)",
    )
    parser.add_argument(
        "--ready-file",
        help="once accepting connections, write {host, port, pid} as JSON to this file",
    )
    return parser.parse_args(argv)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _write_ready_file(path: str, broker: Broker) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"host": broker.host, "port": broker.port, "pid": os.getpid()}, f)
    os.replace(tmp, path)


async def _serve(config: BrokerConfig, ready_file: str | None) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    broker = Broker(config)
    try:
        await broker.start()
    except Exception as exc:  # port in use, unreadable log dir, bad metadata file...
        log.error("cannot start: %s", exc, exc_info=log.isEnabledFor(logging.DEBUG))
        await broker.stop()
        return 1
    if ready_file:
        _write_ready_file(ready_file, broker)
    await stop.wait()
    await broker.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the process exit status."""
    args = _parse_args(argv)
    _setup_logging(args.log_level)
    try:
        config = BrokerConfig.load(args.config, args.override)
    except ConfigError as exc:
        print(f"pykfk-broker: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"pykfk-broker: cannot read {args.config}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    for key in config.ignored_keys_set():
        log.info("%s is accepted for compatibility and has no effect", key)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_serve(config, args.ready_file))
    if not hasattr(asyncio, "Runner"):  # Python 3.10
        uvloop.install()
        return asyncio.run(_serve(config, args.ready_file))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_serve(config, args.ready_file))


if __name__ == "__main__":
    sys.exit(main())
