"""A broker's membership of a ZooKeeper-coordinated cluster: what ``pykfk.broker.Broker``
adds when ``zookeeper.connect`` is set.

Start order (Kafka's ``KafkaServer.startup``): connect to ZooKeeper and learn the cluster
id (``connect``), open the logs, listen, then ``join``: register ``/brokers/ids/<id>``
with the bound address, start the replica manager on the partition states already in
ZooKeeper, run for controller. Stop order: controlled shutdown (leaderships move away
while this broker still serves), stop fetching, leave the controller office, close the
session.

ZooKeeper events reach the replica manager through the store's listeners; after a
session expiry this broker registers again and re-applies every partition state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any

from pykfk.cluster.controller import Controller, ControllerSettings
from pykfk.cluster.metadata import (
    NO_LEADER,
    BrokerInfo,
    TopicExistsError,
    TopicInfo,
    UnknownTopicError,
)
from pykfk.cluster.replica import ReplicaManager, ReplicaSettings
from pykfk.cluster.zookeeper import ZooKeeperMetadataStore
from pykfk.errors import ErrorCode, KafkaError

log = logging.getLogger("pykfk.cluster")

OFFSETS_TOPIC = "__consumer_offsets"


class ClusterNode:
    """Cluster services of one Broker. Loop-affine."""

    def __init__(self, broker: Any):
        self.broker = broker
        self.config = broker.config
        self.store: ZooKeeperMetadataStore | None = None
        self.replica_manager: ReplicaManager | None = None
        self.controller: Controller | None = None
        self._coordinator_lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._known_partitions: dict[str, int] = {}
        self._stopping = False
        self._shutdown_requested = False

    # -- lifecycle ---------------------------------------------------------------------

    async def connect(self) -> ZooKeeperMetadataStore:
        cfg = self.config
        advertised = cfg.advertised_listeners[0]
        self.store = ZooKeeperMetadataStore(
            cfg.zookeeper_connect,
            BrokerInfo(cfg.broker_id, advertised.host or "127.0.0.1", advertised.port, cfg["broker.rack"]),
            session_timeout_ms=cfg["zookeeper.session.timeout.ms"],
            connection_timeout_ms=cfg["zookeeper.connection.timeout.ms"],
        )
        await self.store.start()
        # From the first request on, client requests go through the replica manager: it
        # answers NOT_LEADER_OR_FOLLOWER until the partition states are applied, so a
        # restarting broker never serves (or acknowledges) as if it were standalone.
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
            ),
            log_config_for=self.broker._log_config_for_name,
            notify=self.broker.appended,
        )
        return self.store

    async def join(self) -> None:
        """Register, start replicating, run for controller. Raises BrokerIdInUseError."""
        cfg = self.config
        broker = self.broker
        store = self.store
        assert store is not None
        advertised = cfg.advertised_listeners[0]
        await store.register_broker(
            BrokerInfo(cfg.broker_id, advertised.host or broker.host, advertised.port or broker.port, cfg["broker.rack"])
        )
        assert self.replica_manager is not None
        self.replica_manager.log_manager = broker.log_manager
        self.replica_manager.leadership_listeners.append(self._on_leadership)
        self.replica_manager.start()
        store.add_listener(self._on_store_event)
        self._delete_stray_logs()
        self._apply_all()
        self.controller = Controller(
            cfg.broker_id,
            store,
            ControllerSettings(
                unclean_leader_election=cfg["unclean.leader.election.enable"],
                auto_leader_rebalance=cfg["auto.leader.rebalance.enable"],
                imbalance_check_interval_s=cfg["leader.imbalance.check.interval.seconds"],
                imbalance_per_broker_percentage=cfg["leader.imbalance.per.broker.percentage"],
            ),
        )
        self.controller.start()

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this broker's leaderships away and take it out of
        every ISR, then stop fetching (Kafka's controlled shutdown)."""
        store, manager = self.store, self.replica_manager
        if store is None or manager is None or self._shutdown_requested:
            return
        # State changes keep being applied meanwhile: they are how leaderships leave.
        self._shutdown_requested = True
        if self.config["controlled.shutdown.enable"]:
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
        manager.log_end_waiters.wake_all()  # parked follower fetches answer now, as consumers' do

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
        else:
            self._known_partitions[topic] = info.partitions
            config = self.broker.log_config_for(info)
            for (t, _p), partition in self.replica_manager.partitions.items():
                if t == topic and partition.log.config != config:
                    partition.log.update_config(config)
        for partition in range(count):
            self.replica_manager.apply_state(topic, partition)

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
        """Logs of topics deleted while this broker was down."""
        assert self.store is not None
        topics = self.store.topics()
        for (topic, partition) in list(self.broker.log_manager.logs()):
            if topic not in topics:
                log.info("deleting log %s-%d: the topic no longer exists", topic, partition)
                self.broker.log_manager.delete_log(topic, partition)

    # -- group coordinator follows __consumer_offsets leadership -----------------------

    def _on_leadership(self, topic: str, partition: int, leader: bool) -> None:
        if topic == OFFSETS_TOPIC and self.broker.group_coordinator is not None:
            self._spawn(self._move_coordinator(partition, leader))

    async def _move_coordinator(self, partition: int, leader: bool) -> None:
        coordinator = self.broker.group_coordinator
        async with self._coordinator_lock:
            manager = self.replica_manager
            assert manager is not None
            current = manager.partitions.get((OFFSETS_TOPIC, partition))
            is_leader = current is not None and current.role == "leader"
            if is_leader != leader:
                return  # moved again meanwhile; the later event does the work
            try:
                if leader:
                    await coordinator.load_partition(partition, ReplicatedOffsetsLog(self, partition))
                else:
                    await coordinator.unload_partition(partition)
            except Exception:
                log.exception("group coordinator %s of %s-%d failed", "load" if leader else "unload",
                              OFFSETS_TOPIC, partition)

    async def ensure_offsets_topic(self, partitions: int, configs: dict[str, str]) -> None:
        """Create ``__consumer_offsets`` on first use, replicated
        ``offsets.topic.replication.factor`` times (fewer when fewer brokers are up)."""
        assert self.store is not None
        if self.store.get_topic(OFFSETS_TOPIC) is not None:
            return
        live = len(self.store.live_broker_ids())
        factor = min(self.config["offsets.topic.replication.factor"], live)
        if factor < self.config["offsets.topic.replication.factor"]:
            log.warning("creating %s with replication factor %d: only %d brokers are up", OFFSETS_TOPIC, factor, live)
        with contextlib.suppress(TopicExistsError):
            await self.store.create_topic(OFFSETS_TOPIC, partitions, factor, configs)

    def leader_node(self, topic: str, partition: int) -> tuple[int, str, int] | None:
        assert self.store is not None
        state = self.store.partition_state(topic, partition)
        if state is None or state.leader == NO_LEADER:
            return None
        broker = self.store.get_broker(state.leader)
        if broker is None:
            return None
        return broker.node_id, broker.host, broker.port

    # -- topic changes through ZooKeeper ----------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Any) -> TopicInfo:
        assert self.store is not None
        try:
            return await self.store.create_topic(name, partitions, replication_factor, configs)
        except TopicExistsError:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.") from None

    async def delete_topic(self, name: str) -> None:
        assert self.store is not None
        try:
            await self.store.delete_topic(name)
        except UnknownTopicError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist") from None

    async def create_partitions(self, name: str, total: int) -> TopicInfo:
        assert self.store is not None
        try:
            return await self.store.create_partitions(name, total)
        except UnknownTopicError:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {name} does not exist") from None


class ReplicatedOffsetsLog:
    """The coordinator's storage for one ``__consumer_offsets`` partition this broker
    leads: appends return once the ISR has them (acks=all)."""

    def __init__(self, node: ClusterNode, partition: int):
        from pykfk.group import LogOffsetsLog

        manager = node.replica_manager
        assert manager is not None
        self.node = node
        self.partition = partition
        self._reader = LogOffsetsLog(manager.partitions[(OFFSETS_TOPIC, partition)].log)

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        from pykfk._core.records import build_batch

        manager = self.node.replica_manager
        if manager is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR)
        now_ms = int(time.time() * 1000)
        batch = bytearray(build_batch([(k, v, now_ms, ()) for k, v in records]))
        timeout_ms = self.node.config["offsets.commit.timeout.ms"]
        try:
            await manager.append(OFFSETS_TOPIC, self.partition, batch, -1, timeout_ms)
        except KafkaError as exc:
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KafkaError(ErrorCode.NOT_COORDINATOR, str(exc)) from None
            raise

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        return self._reader.read_all()
