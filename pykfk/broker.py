"""The Broker composition root: config, metadata store, logs, replica manager, group
coordinator and network server, wired together and started and stopped in order.

A standalone broker (no ``zookeeper.connect``) is a cluster of one: the embedded
metadata store makes it the controller and the leader of every partition, and the same
replica manager, handlers and coordinator serve it as serve a ZooKeeper cluster
(``pykfk.cluster.node``). Nothing outside ``pykfk.cluster`` knows which store runs.

Broker implements ``pykfk.server.services.BrokerServices``, what request handlers may
use. The command line (``pykfk-broker``) is ``pykfk.cli.broker``; ``python -m
pykfk.broker`` runs it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

# The broker cannot run without the compiled core: importing it here makes a build
# without the extensions fail at once, with pykfk._core's message saying how to build.
import pykfk._core  # noqa: F401
from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.cluster.metadata import MetadataStore, TopicInfo
from pykfk.cluster.node import ClusterNode
from pykfk.cluster.replica import ReplicaManager
from pykfk.cluster.topics import INTERNAL_TOPICS, OFFSETS_TOPIC, TopicManager
from pykfk.config import BROKER_KEYS, BrokerConfig, ConfigError, format_config_value
from pykfk.errors import KafkaError
from pykfk.log import LogConfig, LogManager
from pykfk.metrics.stats import RequestStats
from pykfk.server import log_dir_moves, share_state
from pykfk.server.loop_stalls import LoopStallMonitor

if TYPE_CHECKING:
    from pykfk.group import GroupCoordinator
    from pykfk.group.leadership import CoordinatorLeadership
    from pykfk.metrics.endpoint import MetricsEndpoint
    from pykfk.security.acl import Authorizer
    from pykfk.security.quotas import QuotaManager
    from pykfk.server.connection import KafkaServer
    from pykfk.server.dispatch import Registry
    from pykfk.txn import TransactionCoordinator
    from pykfk.txn.leadership import TransactionLeadership
    from pykfk.txn.markers import BrokerMarkerWriter

log = logging.getLogger("pykfk.broker")
# The entity of the cluster-wide dynamic broker settings (Kafka's ZooKeeper layout).
DEFAULT_BROKER_ENTITY = "<default>"


class Broker:
    """One broker. Create, ``await start()``, ``await stop()``; loop-affine."""

    def __init__(self, config: BrokerConfig, clock: Clock = SYSTEM_CLOCK):
        self.config = config
        # Every read of time of the broker's parts (logs, replicas, sessions, quotas).
        self.clock = clock
        self.cluster = ClusterNode(self)
        self.log_manager: LogManager | None = None
        self.server: KafkaServer | None = None  # the first listener's
        self.servers: list[KafkaServer] = []
        self.bound: dict[str, tuple[str, int]] = {}  # listener name -> bound (host, port)
        self.host = ""
        self.port = 0
        # BrokerServices, set by start() (plain attributes: handlers read them per request).
        self.metadata: MetadataStore
        self.replica_manager: ReplicaManager
        self.topics: TopicManager
        self.group_coordinator: GroupCoordinator
        self.authorizer: Authorizer | None = None
        self.quotas: QuotaManager
        self.stopping = False
        self._started = False
        # Counted by the dispatcher, timed by the connections when the endpoint is on.
        self.request_stats = RequestStats(timing=bool(config["metrics.listener"]))
        self.registry: Registry | None = None  # the APIs served, once started
        self.metrics_endpoint: MetricsEndpoint | None = None  # with metrics.listener set
        self.loop_stalls: LoopStallMonitor | None = None  # with PYKFK_LOOP_STALL_MS set
        self._default_log_config = LogConfig.from_properties(_as_strings(config.topic_defaults()))
        self._group_coordinator: GroupCoordinator | None = None
        self._coordinator_leadership: CoordinatorLeadership | None = None
        self.transaction_coordinator: TransactionCoordinator | None = None
        self._transaction_leadership: TransactionLeadership | None = None
        self._marker_writer: BrokerMarkerWriter | None = None
        self._token_sweep: Any = None  # removes expired delegation tokens (pykfk.security.credentials)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store and the logs, bind the listener, join the cluster, then serve:
        no request is answered before the broker can name itself and a controller."""
        from pykfk.server.connection import KafkaServer
        from pykfk.server.dispatch import Dispatcher, Registry
        from pykfk.server.session import ListenerSecurity

        cfg = self.config
        # TLS key stores and SASL settings are checked before anything else is opened.
        securities = [ListenerSecurity(listener, cfg) for listener in cfg.listeners]
        for directory in cfg.log_dirs:
            os.makedirs(directory, exist_ok=True)
        store = self.metadata = await self.cluster.connect()
        self._settings_changed(self._take_dynamic_configs())
        store.add_listener(self._broker_config_changed)
        assert self.cluster.replica_manager is not None
        self.replica_manager = self.cluster.replica_manager
        self.topics = TopicManager(cfg, store, self._default_log_config,
                                   self.replica_manager.created, self._placement_problem)
        from pykfk.security.quotas import QuotaManager

        self.quotas = QuotaManager(store.client_quotas, lambda: store.quota_version)
        store.add_listener(self._quota_changed)
        if cfg["authorizer.class.name"]:
            from pykfk.security.acl import Authorizer

            self.authorizer = Authorizer(store.acls, lambda: store.acl_version, cfg["super.users"],
                                         cfg["allow.everyone.if.no.acl.found"])
        self.log_manager = self._new_log_manager(store.cluster_id)
        # Recovery after an unclean stop can take a while: keep the loop free meanwhile.
        await asyncio.get_running_loop().run_in_executor(None, self.log_manager.open)
        self.log_manager.start(asyncio.get_running_loop())
        await self._start_group_coordinator()
        await self._start_transaction_coordinator()
        self.registry = Registry.default()
        dispatcher = Dispatcher(self, self.registry)
        for listener, security in zip(cfg.listeners, securities, strict=True):
            server = KafkaServer(
                dispatcher,
                security=security,
                max_request_bytes=cfg.socket_request_max_bytes,
                idle_ms=cfg.connections_max_idle_ms,
                max_in_flight=cfg.queued_max_requests,
                max_prelogin_bytes=cfg["sasl.server.max.receive.size"],
            )
            self.servers.append(server)
            self.bound[listener.name] = await server.bind(listener.host, listener.port)
        self.server = self.servers[0]
        self.host, self.port = self.bound[cfg.listeners[0].name]
        if cfg["metrics.listener"]:
            # Bound with the listeners, so a taken port stops the start before joining;
            # it reports nothing until the broker serves.
            from pykfk.metrics.serve import start_endpoint

            self.metrics_endpoint = await start_endpoint(self, cfg["metrics.listener"])
        await self.cluster.join()
        log_dir_moves.resume_moves(self)
        if cfg["delegation.token.secret.key"]:
            from pykfk.security.credentials import ExpiredTokenSweep

            self._token_sweep = ExpiredTokenSweep(store, cfg["delegation.token.expiry.check.interval.ms"])
            self._token_sweep.start()
        # What start made (logs, replicas, segments) lives as long as the broker: one
        # collection now, then out of the collector's walks, so a broker of thousands of
        # partitions does not pause its clients for full collections of them later.
        gc.collect()
        gc.freeze()
        self.loop_stalls = LoopStallMonitor.from_environment()
        if self.loop_stalls is not None:
            self.loop_stalls.start(asyncio.get_running_loop())
        for server in self.servers:
            await server.serve()
        self._started = True
        log.info(
            "broker %d started: listening on %s, advertised as %s, log dirs %s, cluster id %s",
            cfg.broker_id,
            ", ".join(f"{name}://{host}:{port}" for name, (host, port) in self.bound.items()),
            ", ".join(f"{e.listener}://{e.host}:{e.port}" for e in store.broker.endpoints),
            ",".join(cfg.log_dirs), store.cluster_id,
        )

    def _placement_problem(self) -> str | None:
        """Why this broker's log dirs can take no new partition now, or None."""
        return self.log_manager.placement_problem() if self.log_manager is not None else None

    def _new_log_manager(self, cluster_id: str) -> LogManager:
        cfg = self.config
        flush_check_ms = (
            cfg["log.flush.scheduler.interval.ms"] if cfg.is_explicit("log.flush.scheduler.interval.ms") else 1000
        )
        return LogManager(
            cfg.log_dirs,
            self._default_log_config,
            broker_id=cfg.broker_id,
            cluster_id=cluster_id,
            config_for=self.log_config_for_name,
            retention_check_interval_ms=cfg.log_retention_check_interval_ms,
            flush_check_interval_ms=flush_check_ms,
            cleaner_enable=cfg["log.cleaner.enable"],
            cleaner_backoff_ms=cfg["log.cleaner.backoff.ms"],
            cleaner_dedupe_buffer_size=cfg["log.cleaner.dedupe.buffer.size"],
            # Followers and new leaders start from the checkpointed high watermark.
            checkpoint_interval_ms=cfg["replica.high.watermark.checkpoint.interval.ms"],
            min_free_bytes=cfg["log.dir.free.bytes.min"],
            alert_free_bytes=cfg["log.dir.free.bytes.alert"],
            dir_check_interval_ms=cfg["log.dir.check.interval.ms"],
            floor_exempt_topics=tuple(INTERNAL_TOPICS),
            clock=self.clock,
        )

    async def stop(self) -> None:
        """Hand leaderships over, answer in-flight requests, flush and checkpoint."""
        if self.stopping:
            return
        self.stopping = True
        log.info("broker %d shutting down", self.config.broker_id)
        gc.unfreeze()  # what start froze (see start) may be garbage once this broker is gone
        if self.loop_stalls is not None:
            self.loop_stalls.stop()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        if self._token_sweep is not None:
            await self._token_sweep.stop()
        await self.cluster.controlled_shutdown()
        if self._coordinator_leadership is not None:
            await self._coordinator_leadership.stop()
        if self._group_coordinator is not None:
            # Parked JoinGroup/SyncGroup calls answer NOT_COORDINATOR while the server
            # can still send them; pending offset writes finish before the logs close.
            await self._group_coordinator.shutdown()
        await self._stop_transaction_coordinator()
        share_state.close_persister(self)
        if self.servers:
            await asyncio.gather(*(server.shutdown() for server in self.servers))
        await log_dir_moves.stop_moves(self)
        await self.cluster.stop()
        if self.log_manager is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.log_manager.shutdown)
        self.cluster.close()
        log.info("broker %d stopped", self.config.broker_id)

    async def _start_group_coordinator(self) -> None:
        """Start the coordinator before joining: it loads the ``__consumer_offsets``
        partitions this broker leads as leaderships arrive."""
        from pykfk.group import GroupConfig, GroupCoordinator
        from pykfk.group.leadership import CoordinatorLeadership

        props = self.config.group_properties()
        info = self.metadata.get_topic(OFFSETS_TOPIC)
        if info is not None:
            # As in Kafka, an existing topic's partition count wins over the setting: the
            # group -> partition mapping must not move under committed offsets.
            props["offsets.topic.num.partitions"] = info.partitions
        self._group_coordinator = self.group_coordinator = GroupCoordinator(
            GroupConfig.from_properties(props), partition_exists=self.partition_exists
        )
        await self._group_coordinator.start()
        # It loads the __consumer_offsets partitions this broker comes to lead.
        self._coordinator_leadership = CoordinatorLeadership(
            self.group_coordinator, self.replica_manager, self.config["offsets.commit.timeout.ms"])

    async def _start_transaction_coordinator(self) -> None:
        """Like the group coordinator: started before joining, it loads the
        ``__transaction_state`` partitions this broker comes to lead."""
        from pykfk.txn import TRANSACTION_STATE_TOPIC, TransactionCoordinator, TxnConfig
        from pykfk.txn.leadership import TransactionLeadership
        from pykfk.txn.markers import BrokerMarkerWriter

        props = self.config.transaction_properties()
        info = self.metadata.get_topic(TRANSACTION_STATE_TOPIC)
        if info is not None:
            # An existing topic's partition count wins: transactional ids must not move.
            props["transaction.state.log.num.partitions"] = info.partitions
        config = TxnConfig.from_properties(props)
        self._marker_writer = BrokerMarkerWriter(self, config.write_timeout_ms)
        self.transaction_coordinator = TransactionCoordinator(
            config, allocate_producer_id=self.allocate_producer_id, markers=self._marker_writer,
            clock=self.clock)
        await self.transaction_coordinator.start()
        self._transaction_leadership = TransactionLeadership(
            self.transaction_coordinator, self.replica_manager, config.write_timeout_ms)

    async def _stop_transaction_coordinator(self) -> None:
        if self._transaction_leadership is not None:
            await self._transaction_leadership.stop()
        if self.transaction_coordinator is not None:
            await self.transaction_coordinator.shutdown()
        if self._marker_writer is not None:
            self._marker_writer.close()

    async def ensure_transaction_topic(self) -> None:
        """Create ``__transaction_state`` on first use (the first FindCoordinator for a
        transactional id), replicated ``transaction.state.log.replication.factor`` times
        (fewer when fewer brokers are up), and wait until this broker loaded what it leads."""
        from pykfk.cluster.metadata import TopicExistsError
        from pykfk.txn import TRANSACTION_STATE_TOPIC, TRANSACTION_STATE_TOPIC_CONFIG

        store = self.metadata
        assert self.transaction_coordinator is not None and self._transaction_leadership is not None
        if store.get_topic(TRANSACTION_STATE_TOPIC) is None:
            cfg = self.config
            factor = min(cfg["transaction.state.log.replication.factor"], len(store.live_broker_ids()))
            configs = {**{k: str(v) for k, v in TRANSACTION_STATE_TOPIC_CONFIG.items()},
                       "segment.bytes": str(cfg["transaction.state.log.segment.bytes"]),
                       "min.insync.replicas": str(min(cfg["transaction.state.log.min.isr"], max(factor, 1)))}
            try:
                await store.create_topic(TRANSACTION_STATE_TOPIC,
                                         self.transaction_coordinator.config.num_partitions, max(factor, 1), configs)
            except TopicExistsError:
                pass
        await self._internal_topic_led(TRANSACTION_STATE_TOPIC)
        await self._transaction_leadership.settled()

    async def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                 partitions: list[tuple[str, int]], add: bool = False) -> dict[tuple[str, int], int]:
        """KIP-890's check for a partition leader: asks the id's coordinator. When none
        answers, NOT_ENOUGH_REPLICAS (KIP-890's mapping: the producer retries).
        ``add`` (transaction version 2: Produce v12+, TxnOffsetCommit v5+): the
        coordinator adds the partitions to the transaction, opening it if need be."""
        from pykfk.cluster.metadata import NO_LEADER
        from pykfk.errors import ErrorCode
        from pykfk.txn import TRANSACTION_STATE_TOPIC

        coordinator, writer = self.transaction_coordinator, self._marker_writer
        unavailable = dict.fromkeys(partitions, int(ErrorCode.NOT_ENOUGH_REPLICAS))
        if coordinator is None or writer is None:
            return unavailable
        # Retriable answers become NOT_ENOUGH_REPLICAS (KIP-890's mapping: the producer
        # retries); an added partition of a transaction still ending is one of them.
        retriable = {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                     ErrorCode.COORDINATOR_LOAD_IN_PROGRESS} | ({ErrorCode.CONCURRENT_TRANSACTIONS} if add else set())
        if coordinator.is_coordinator(transactional_id):
            if add:
                codes = dict.fromkeys(partitions, int(await coordinator.add_partitions(
                    transactional_id, producer_id, producer_epoch, partitions)))
            else:
                return {tp: int(coordinator.verify_partition(transactional_id, producer_id, producer_epoch, tp))
                        for tp in partitions}
        else:
            state = self.metadata.partition_state(TRANSACTION_STATE_TOPIC,
                                                  coordinator.partition_for(transactional_id))
            if state is None or state.leader in (NO_LEADER, self.broker_id):
                return unavailable
            codes = await writer.verify(state.leader, transactional_id, producer_id, producer_epoch, partitions,
                                        verify_only=not add)
        return {tp: int(ErrorCode.NOT_ENOUGH_REPLICAS) if code in retriable
                else int(ErrorCode.INVALID_PRODUCER_EPOCH) if code == ErrorCode.PRODUCER_FENCED
                else code for tp, code in codes.items()}

    def transaction_coordinator_node(self, partition: int, listener: str) -> tuple[int, str, int] | None:
        from pykfk.txn import TRANSACTION_STATE_TOPIC

        return self.cluster.leader_node(TRANSACTION_STATE_TOPIC, partition, listener)

    def _quota_changed(self, kind: str, key: Any) -> None:
        if kind == "quota":
            self.quotas.refresh()
        elif kind == "topic" and self._group_coordinator is not None and self.metadata.get_topic(key) is None:
            # A deleted topic's committed offsets go with it (Kafka's onPartitionsDeleted).
            self._group_coordinator.topic_deleted(key)

    # -- settings changed at run time (dynamic broker configs, a re-read file) ---------

    def _broker_config_changed(self, kind: str, entity: Any) -> None:
        if kind == "broker_config" and entity in (DEFAULT_BROKER_ENTITY, str(self.broker_id)):
            self._settings_changed(self._take_dynamic_configs())

    def _take_dynamic_configs(self) -> list[str]:
        """This broker's settings with the stored dynamic ones on top (KIP-226)."""
        try:
            return self.config.apply_dynamic(self.metadata.broker_configs(DEFAULT_BROKER_ENTITY),
                                             self.metadata.broker_configs(str(self.broker_id)))
        except ConfigError as exc:  # written by another tool: keep what runs
            log.warning("dynamic broker configs not applied: %s", exc)
            return []

    def reload_properties(self, props: Mapping[str, Any]) -> list[str]:
        """A re-read server.properties: its dynamically changeable settings apply at once.
        Raises ConfigError (nothing changed) for a bad value or a setting that needs a
        restart. Returns the names of the settings whose value changed."""
        changed = self.config.replace_static(props)
        self._settings_changed(changed)
        return changed

    def _settings_changed(self, changed: list[str]) -> None:
        """New broker settings reach what was built from them: the topic defaults of
        new topics and of every log without its own override."""
        if not changed:
            return
        log.info("broker %d settings changed: %s", self.broker_id,
                 ", ".join(f"{name}={format_config_value(self.config[name])}" for name in sorted(changed)))
        for name in sorted(changed):
            if BROKER_KEYS[name].ignored:
                log.info("%s is accepted for compatibility and has no effect", name)
        self._default_log_config = LogConfig.from_properties(_as_strings(self.config.topic_defaults()))
        if self.log_manager is None:
            return  # still starting: the logs are made with the new defaults
        self.topics.default_log_config = self._default_log_config
        self.log_manager.default_config = self._default_log_config
        for info in self.metadata.topics().values():
            config = self.log_config_for(info)
            for partition in range(info.partitions):
                plog = self.get_log(info.name, partition)
                if plog is not None and plog.config != config:
                    plog.update_config(config)

    # -- BrokerServices --------------------------------------------------------------

    @property
    def broker_id(self) -> int:
        return self.config.broker_id

    @property
    def serving(self) -> bool:
        """Started and not stopping: every part is there (the metrics read them)."""
        return self._started and not self.stopping

    async def ensure_offsets_topic(self) -> None:
        """Create ``__consumer_offsets`` on first use (Kafka does so on the first
        FindCoordinator), replicated ``offsets.topic.replication.factor`` times, and wait
        for the coordinator to load what this broker leads; cheap once done."""
        from pykfk.config import TOPIC_KEYS
        from pykfk.group import OFFSETS_TOPIC_CONFIG

        configs = {k: str(v) for k, v in OFFSETS_TOPIC_CONFIG.items() if k in TOPIC_KEYS}
        await self.cluster.ensure_offsets_topic(self.group_coordinator.config.offsets_topic_num_partitions, configs)
        await self._internal_topic_led(OFFSETS_TOPIC)
        if self._coordinator_leadership is not None:  # None before start and after stop
            await self._coordinator_leadership.settled()

    async def _internal_topic_led(self, topic: str) -> None:
        """Wait until this broker took up the leaderships of ``topic`` it was given: a
        new topic's logs are made, and its leader epochs written, off the loop, and a
        FindCoordinator answered before that would send clients to a coordinator that
        answers NOT_COORDINATOR (which librdkafka does not retry for every request)."""
        with contextlib.suppress(KafkaError):  # logs that could not be made: no leader, the
            await self.replica_manager.created(topic)  # coordinator stays unavailable
        await self.replica_manager.leaders_settled()

    def coordinator_node(self, offsets_partition: int, listener: str) -> tuple[int, str, int] | None:
        return self.cluster.leader_node(OFFSETS_TOPIC, offsets_partition, listener)

    async def allocate_producer_id(self) -> int:
        return await self.metadata.allocate_producer_id()

    # -- for the cluster layer and the coordinator -------------------------------------

    def partition_exists(self, topic: str, partition: int) -> bool:
        info = self.metadata.get_topic(topic)
        return info is not None and 0 <= partition < info.partitions

    def log_config_for(self, topic: TopicInfo) -> LogConfig:
        return self._default_log_config.with_overrides(topic.configs)

    def log_config_for_name(self, name: str) -> LogConfig:
        info = self.metadata.get_topic(name)
        return self._default_log_config if info is None else self.log_config_for(info)

    def get_log(self, topic: str, partition: int) -> Any:
        """The partition's Log on this broker (leader or follower), or None."""
        return self.log_manager.get_log(topic, partition) if self.log_manager is not None else None


def _as_strings(props: Mapping[str, Any]) -> dict[str, str]:
    return {k: s for k, v in props.items() if (s := format_config_value(v)) is not None}


if __name__ == "__main__":
    from pykfk.cli.broker import main

    sys.exit(main())
