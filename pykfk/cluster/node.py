"""A broker's membership of its cluster: the metadata store, the replica manager and
(with ZooKeeper) the controller, the same on every broker.

A standalone broker is a cluster of one: its store is the embedded file store
(``pykfk.cluster.embedded``), which names it leader of every partition with ISR =
{itself}; with ``zookeeper.connect`` set the store is ZooKeeper's (Kafka's znodes) and a
controller elects leaders. Everything above this package uses the same calls either way.

Start order (Kafka's ``KafkaServer.startup``): open the store and learn the cluster id
(``connect``), open the logs, bind the listener, then ``join``: register this broker with
its bound address, start the replica manager on the partition states already known, run
for controller; only then does the listener serve requests. Stop order: controlled
shutdown (leaderships move away while this broker still serves), stop fetching, leave the
controller office, close the store.

Store events reach the replica manager through the store's listeners; after a ZooKeeper
session expiry this broker registers again and re-applies every partition state.

Partition reassignments and leader elections asked for by an admin go to the controller
(NOT_CONTROLLER on other brokers). The store comes with its controller: ZooKeeper's with a
``Controller`` that runs for the office; the embedded store with a ``LocalController``
(``local_controller.py``): a cluster of one is its own controller, and every partition
is on this broker and led by it, so there is nothing to move or elect. The node asks
the same questions of either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pykfk.cluster.channel import ChannelSecurity
from pykfk.cluster.controller import (
    ClusterController,
    Controller,
    ControllerSettings,
    ControllerStore,
    ElectionOutcome,
    TopicPartition,
)
from pykfk.cluster.embedded import EmbeddedMetadataStore
from pykfk.cluster.local_controller import LocalController
from pykfk.cluster.metadata import (
    NO_LEADER,
    BrokerInfo,
    Endpoint,
    MetadataStore,
    PartitionAssignment,
    TopicExistsError,
    TopicInfo,
)
from pykfk.cluster.replica import ReplicaManager, ReplicaSettings
from pykfk.cluster.topics import OFFSETS_TOPIC
from pykfk.config import BrokerConfig
from pykfk.errors import ErrorCode, KafkaError

log = logging.getLogger("pykfk.cluster")



def inter_broker_security(cfg: BrokerConfig) -> ChannelSecurity:
    """TLS and SASL login of this broker's connections to the inter-broker listener of
    the others: a client TLS context, and the ``username``/``password`` of that
    listener's JAAS settings for ``sasl.mechanism.inter.broker.protocol`` (for
    OAUTHBEARER, tokens from the identity provider: ``pykfk.security.oauth_login``)."""
    from pykfk.config import ConfigError
    from pykfk.security.jaas import JaasError, parse_jaas
    from pykfk.security.sasl import CLIENT_MECHANISMS
    from pykfk.security.tls import client_context

    name = cfg.inter_broker_listener_name
    listener = next(entry for entry in cfg.listeners if entry.name == name)
    context = client_context(cfg, name) if listener.uses_tls else None
    if not listener.uses_sasl:
        return ChannelSecurity(context)
    mechanism = cfg["sasl.mechanism.inter.broker.protocol"].upper()
    if mechanism not in CLIENT_MECHANISMS:
        raise ConfigError("sasl.mechanism.inter.broker.protocol",
                          f"brokers log in to each other with {', '.join(CLIENT_MECHANISMS)}, not {mechanism}")
    key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = cfg.jaas_config(name, mechanism)
    try:
        options = parse_jaas(text).options if text else {}
    except JaasError as exc:
        raise ConfigError(key, str(exc)) from None
    if mechanism == "OAUTHBEARER":
        from pykfk.security.oauth_login import login_source

        trust = cfg["ssl.truststore.location"] if cfg["ssl.truststore.type"] == "PEM" else None
        try:
            source = login_source(cfg, name, options, trust)
        except ValueError as exc:
            raise ConfigError(key, f"the inter-broker listener {name}: {exc}") from None
        return ChannelSecurity(context, mechanism, bearer_token=source.token, sasl_extensions=source.extensions)
    if "username" not in options or "password" not in options:
        raise ConfigError(key, f"the inter-broker listener {name} needs username and password for SASL/{mechanism}")
    return ChannelSecurity(context, mechanism, options["username"], options["password"])


class ClusterNode:
    """Cluster services of one Broker. Loop-affine."""

    def __init__(self, broker: Any):
        self.broker = broker
        self.config = broker.config
        self.store: MetadataStore | None = None
        self.replica_manager: ReplicaManager | None = None
        # The store's controller (made with the store in ``connect``, run from ``join``).
        self.controller: ClusterController | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._known_partitions: dict[str, int] = {}
        self._topic_configs: dict[str, dict[str, str]] = {}  # the overrides the logs here have
        self._stopping = False
        self._shutdown_requested = False

    # -- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> MetadataStore:
        """Open the metadata store (ZooKeeper's with ``zookeeper.connect``, else the
        embedded one in the first log dir) with its controller, and create the replica
        manager."""
        cfg = self.config
        advertised = cfg.advertised_listeners[0]
        me = BrokerInfo(cfg.broker_id, advertised.host or "127.0.0.1", advertised.port, cfg["broker.rack"])
        store: MetadataStore
        if cfg.zookeeper_connect:
            from pykfk.cluster.zookeeper import ZooKeeperMetadataStore

            zk_store = ZooKeeperMetadataStore(
                cfg.zookeeper_connect,
                me,
                session_timeout_ms=cfg["zookeeper.session.timeout.ms"],
                connection_timeout_ms=cfg["zookeeper.connection.timeout.ms"],
            )
            await zk_store.start()
            store = zk_store
            self.controller = self._zookeeper_controller(zk_store)
        else:
            embedded = EmbeddedMetadataStore(cfg.log_dirs[0], me)
            store = embedded
            self.controller = LocalController(cfg.broker_id, embedded)
        self.store = store
        # Requests go through the replica manager only once ``join`` applied the
        # partition states (the listener serves after that), so a restarting broker
        # never serves, or acknowledges, a partition it no longer leads.
        self.replica_manager = ReplicaManager(
            cfg.broker_id,
            self.store,
            None,
            ReplicaSettings(
                replica_lag_time_max_ms=cfg["replica.lag.time.max.ms"],
                min_insync_replicas=cfg["min.insync.replicas"],
                fetch_max_bytes=cfg["replica.fetch.max.bytes"],
                fetch_response_max_bytes=cfg["replica.fetch.response.max.bytes"],
                fetch_wait_max_ms=cfg["replica.fetch.wait.max.ms"],
                fetch_min_bytes=cfg["replica.fetch.min.bytes"],
                fetch_backoff_ms=cfg["replica.fetch.backoff.ms"],
                socket_timeout_ms=cfg["replica.socket.timeout.ms"],
                listener=cfg.inter_broker_listener_name,
                follower_throttled_rate=lambda: cfg["follower.replication.throttled.rate"],
                leader_throttled_rate=lambda: cfg["leader.replication.throttled.rate"],
                # A cluster of one has no other broker to reach.
                channel_security=inter_broker_security(cfg) if cfg.zookeeper_connect else None,
            ),
            log_config_for=self.broker.log_config_for_name,
            clock=self.broker.clock,
        )
        return store

    async def join(self) -> None:
        """Register, start replicating, run for controller. Raises BrokerIdInUseError."""
        broker = self.broker
        store = self.store
        assert store is not None
        await store.register_broker(self._registration())
        assert self.replica_manager is not None
        self.replica_manager.log_manager = broker.log_manager
        self.replica_manager.start()
        store.add_listener(self._on_store_event)
        self._delete_stray_logs()
        self._apply_all()
        assert self.controller is not None
        self.controller.start()
        await self._wait_until_ready()

    def _registration(self) -> BrokerInfo:
        """This broker as the store lists it: every advertised listener, at its bound
        port where the listener asked for port 0."""
        cfg = self.config
        endpoints = []
        for listener in cfg.advertised_listeners:
            bound_host, bound_port = self.broker.bound[listener.name]
            endpoints.append(Endpoint(listener.name, listener.security_protocol,
                                      listener.host or bound_host, listener.port or bound_port))
        main = next((e for e in endpoints if e.listener == "PLAINTEXT"), endpoints[0])
        return BrokerInfo(cfg.broker_id, main.host, main.port, cfg["broker.rack"], tuple(endpoints))

    async def _wait_until_ready(self) -> None:
        """Until the store lists this broker and a controller, so the first Metadata a
        client gets names both (an admin client gives up on controller -1)."""
        assert self.store is not None
        store, me = self.store, self.config.broker_id
        timeout_s = self.config["zookeeper.session.timeout.ms"] / 1000
        if not await store.wait_for(lambda: me in store.live_broker_ids() and store.controller_id() >= 0, timeout_s):
            log.warning("no controller known after %.1f s: serving anyway", timeout_s)

    def _zookeeper_controller(self, store: ControllerStore) -> Controller:
        cfg = self.config
        return Controller(
            cfg.broker_id,
            store,
            ControllerSettings(
                unclean_leader_election=cfg["unclean.leader.election.enable"],
                auto_leader_rebalance=cfg["auto.leader.rebalance.enable"],
                imbalance_check_interval_s=cfg["leader.imbalance.check.interval.seconds"],
                imbalance_per_broker_percentage=cfg["leader.imbalance.per.broker.percentage"],
            ),
        )

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away and take it out of
        every ISR, then stop fetching (Kafka's controlled shutdown)."""
        store, manager = self.store, self.replica_manager
        if store is None or manager is None or self._shutdown_requested:
            return
        # State changes keep being applied meanwhile: they are how leaderships leave.
        self._shutdown_requested = True
        if self.config["controlled.shutdown.enable"] and any(self._movable_leaderships()):
            me = self.config.broker_id
            retries = self.config["controlled.shutdown.max.retries"]
            backoff = self.config["controlled.shutdown.retry.backoff.ms"] / 1000
            wait_s = max(5.0, self.config["zookeeper.session.timeout.ms"] / 1000)
            started = time.monotonic()
            for attempt in range(1, retries + 1):
                try:
                    await store.request_controlled_shutdown()
                    answered = await store.wait_for(
                        lambda: store.shutdown_requests().get(me, b"{}") != b"{}", wait_s)
                    moved = await store.wait_for(lambda: not any(self._movable_leaderships()), wait_s)
                except Exception as exc:  # noqa: BLE001 - ZooKeeper trouble: stop anyway
                    log.warning("controlled shutdown attempt %d failed: %r", attempt, exc)
                    answered = moved = False
                if answered and moved:
                    log.info("controlled shutdown done in %.2f s", time.monotonic() - started)
                    break
                log.info("controlled shutdown attempt %d of %d incomplete", attempt, retries)
                await asyncio.sleep(backoff)
        await manager.stop_fetchers()
        manager.wake_fetches()  # parked fetches answer now

    def _movable_leaderships(self) -> Iterator[Any]:
        """Partitions this broker leads although another live ISR member could."""
        assert self.store is not None and self.replica_manager is not None
        live = self.store.live_broker_ids()
        me = self.config.broker_id
        for p in self.replica_manager.led_partitions():
            if any(r != me and r in live for r in p.isr):
                yield p

    async def stop(self) -> None:
        self._stopping = True
        if self.controller is not None:
            await self.controller.stop()
        if self.replica_manager is not None:
            await self.replica_manager.shutdown()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- ZooKeeper events --------------------------------------------------------------

    def _on_store_event(self, kind: str, key: Any) -> None:
        manager = self.replica_manager
        if manager is None or self._stopping:
            return
        if kind == "partition":
            manager.apply_state(*key)
        elif kind == "topic":
            self._apply_topic(key)
        elif kind == "session" and key == "CONNECTED":
            assert self.store is not None
            if self.store.registration_lost():
                self._spawn(self._rejoin())

    def _apply_topic(self, topic: str) -> None:
        assert self.store is not None and self.replica_manager is not None
        info = self.store.get_topic(topic)
        count = max(self._known_partitions.get(topic, 0), info.partitions if info else 0)
        if info is None:
            self._known_partitions.pop(topic, None)
            self._topic_configs.pop(topic, None)
        else:
            self._known_partitions[topic] = info.partitions
        self.replica_manager.apply_topic(topic, range(count))
        if info is not None:
            self._apply_topic_config(info)

    def _apply_topic_config(self, info: TopicInfo) -> None:
        """A topic's settings changed: its logs here take them. (A new topic's logs are
        made with its settings: nothing to do on first sight.)"""
        known = self._topic_configs.get(info.name)
        self._topic_configs[info.name] = dict(info.configs)
        if known is None or known == info.configs:
            return
        config = self.broker.log_config_for(info)
        for partition in range(info.partitions):
            plog = self.broker.get_log(info.name, partition)
            if plog is not None and plog.config != config:
                plog.update_config(config)

    def _apply_all(self) -> None:
        assert self.store is not None
        for topic in self.store.topics():
            self._apply_topic(topic)

    async def _rejoin(self) -> None:
        """A new ZooKeeper session after the old one expired: register again and
        re-apply every state (those may have changed while this broker was away)."""
        assert self.store is not None
        log.warning("ZooKeeper session expired: registering broker %d again", self.config.broker_id)
        for attempt in range(10):
            try:
                await self.store.register_broker(stale_wait_s=self.config["zookeeper.session.timeout.ms"] / 1000 * 2)
                break
            except Exception as exc:  # noqa: BLE001 - retried; the broker keeps serving meanwhile
                log.warning("re-registration attempt %d failed: %r", attempt + 1, exc)
                await asyncio.sleep(0.5)
        self._apply_all()
        if self.controller is not None:
            self.controller.post("elect")

    def _delete_stray_logs(self) -> None:
        """Logs of topics deleted while this broker was down. The embedded store deletes
        a topic's logs before the deletion returns, so there a log without a topic means
        a lost metadata file: its data is kept (and not served) rather than deleted."""
        assert self.store is not None
        topics = self.store.topics()
        me = self.config.broker_id
        for (topic, partition) in list(self.broker.log_manager.logs()):
            info = topics.get(topic)
            if info is not None and 0 <= partition < info.partitions and me not in info.replicas(partition, me):
                log.info("deleting log %s-%d: the partition moved to other brokers", topic, partition)
                self.broker.log_manager.delete_log(topic, partition)
                continue
            if info is not None:
                continue
            assert self.controller is not None
            if not self.controller.deletes_stray_logs:
                log.warning("log %s-%d belongs to no known topic: kept, not served", topic, partition)
                continue
            log.info("deleting log %s-%d: the topic no longer exists", topic, partition)
            self.broker.log_manager.delete_log(topic, partition)

    async def ensure_offsets_topic(self, partitions: int, configs: dict[str, str]) -> None:
        """Create ``__consumer_offsets`` on first use, replicated
        ``offsets.topic.replication.factor`` times (fewer when fewer brokers are up)."""
        assert self.store is not None
        if self.store.get_topic(OFFSETS_TOPIC) is None:
            await self._create_offsets_topic(partitions, configs)

    async def _create_offsets_topic(self, partitions: int, configs: dict[str, str]) -> None:
        assert self.store is not None and self.controller is not None
        factor = self.controller.internal_topic_replication_factor(
            OFFSETS_TOPIC, self.config["offsets.topic.replication.factor"])
        with contextlib.suppress(TopicExistsError):
            await self.store.create_topic(OFFSETS_TOPIC, partitions, factor, configs)

    def leader_node(self, topic: str, partition: int, listener: str) -> tuple[int, str, int] | None:
        """(id, host, port) of the partition's leader on ``listener``; None when it has
        no leader or the leader has no such listener."""
        assert self.store is not None
        state = self.store.partition_state(topic, partition)
        if state is None or state.leader == NO_LEADER:
            return None
        broker = self.store.get_broker(state.leader)
        address = broker.address(listener) if broker is not None else None
        if address is None:
            return None
        return state.leader, address[0], address[1]

    # -- reassignments and elections (admin APIs) --------------------------------------

    def _active_controller(self) -> ClusterController:
        if self.controller is None or not self.controller.active:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.config.broker_id} is not the controller")
        return self.controller

    async def elect_leaders(self, election_type: int, partitions: Sequence[TopicPartition] | None,
                            timeout_s: float) -> dict[TopicPartition, ElectionOutcome]:
        """ElectLeaders (every partition when ``partitions`` is None); NOT_CONTROLLER
        (KafkaError) on a broker that is not the controller."""
        return await self._active_controller().elect_leaders(election_type, partitions, timeout_s)

    async def alter_partition_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                                            allow_replication_factor_change: bool,
                                            timeout_s: float) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments: per partition None (accepted) or the KafkaError."""
        return await self._active_controller().alter_reassignments(targets, allow_replication_factor_change,
                                                                    timeout_s)

    async def list_partition_reassignments(self, partitions: Sequence[TopicPartition] | None,
                                           timeout_s: float) -> dict[TopicPartition, PartitionAssignment]:
        """ListPartitionReassignments: the moves under way."""
        return await self._active_controller().list_reassignments(partitions, timeout_s)
