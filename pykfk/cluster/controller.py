"""The controller: one broker of the cluster, elected through ``/controller``, that
decides partition leadership and writes it to ZooKeeper (apache/kafka ``KafkaController``
with its partition and replica state machines, much reduced).

Every broker runs a Controller object; it is *active* while this broker holds
``/controller``. Election: create the ephemeral ``/controller``; the winner bumps
``/controller_epoch`` with a conditional set and from then on writes every partition
state in a transaction that checks that epoch's znode version, so a controller that lost
its session (and its office) can no longer write. The others watch ``/controller`` and
race again when it disappears.

Events (handled one at a time, in order, by one task, like Kafka's ControllerEventManager):

- failover: elect leaders for every partition without a live one, drop dead brokers from
  every ISR, create the states of partitions that have none, finish pending deletions and
  controlled shutdowns;
- broker change: the same for the brokers that died; partitions without a leader whose
  ISR holds a returning broker get it as leader (its replicas catch up by fetching);
- topic change: new topics and new partitions get their first state (leader: the first
  live replica of the assignment, ISR: the live replicas);
- topic deletion (``/admin/delete_topics/<t>``): the topic's znodes go, brokers delete
  their logs when they see it vanish;
- controlled shutdown (``/admin/controlled_shutdown/<id>``): every partition led by that
  broker moves to another ISR member and the broker leaves every ISR;
- preferred-leader rebalancing (``auto.leader.rebalance.enable``): every
  ``leader.imbalance.check.interval.seconds``, a broker whose share of preferred
  partitions it does not lead exceeds ``leader.imbalance.per.broker.percentage`` gets
  them back when it is in their ISR.

Leader election from the ISR only unless ``unclean.leader.election.enable`` (broker or
topic config); a partition whose ISR has no live member keeps its last ISR member in the
ISR with no leader, so it comes back cleanly when that broker returns (Kafka's rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Any

from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.cluster.metadata import NO_LEADER, PartitionState

log = logging.getLogger("pykfk.cluster")

# (topic, partition, new state, expected znode version or None for a new state)
StateChange = tuple[str, int, PartitionState, int | None]


class ControllerSettings:
    def __init__(self, **kw: Any):
        self.unclean_leader_election: bool = kw.get("unclean_leader_election", False)
        self.auto_leader_rebalance: bool = kw.get("auto_leader_rebalance", True)
        self.imbalance_check_interval_s: float = kw.get("imbalance_check_interval_s", 300)
        self.imbalance_per_broker_percentage: int = kw.get("imbalance_per_broker_percentage", 10)


class Controller:
    """Loop-affine. ``start()`` after the broker registered; ``stop()`` at shutdown."""

    def __init__(self, broker_id: int, store: Any, settings: ControllerSettings, *, clock: Clock = SYSTEM_CLOCK):
        self.broker_id = broker_id
        self.store = store
        self.settings = settings
        self.clock = clock
        self.epoch = -1
        self.epoch_version = -1
        self.active = False
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._rebalance_task: asyncio.Task[None] | None = None
        self._known_live: set[int] = set()
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="pykfk-controller")
        self.store.add_listener(self._on_store_event)
        self.post("elect")

    async def stop(self) -> None:
        self._stopped = True
        for task in (self._task, self._rebalance_task):
            if task is not None:
                task.cancel()
        await asyncio.gather(*(t for t in (self._task, self._rebalance_task) if t is not None),
                             return_exceptions=True)
        if self.active:
            self.active = False
            await self.store.resign_controller()

    def post(self, kind: str, key: Any = None) -> None:
        if not self._stopped:
            self._queue.put_nowait((kind, key))

    def _on_store_event(self, kind: str, key: Any) -> None:
        if kind == "controller" and key == -1:
            self.post("elect")
        elif kind == "controller" and key != self.broker_id and self.active:
            self.post("resign")
        elif kind == "session":
            if key in ("LOST",):
                self.post("resign")
            elif key == "CONNECTED":
                self.post("elect")
        elif not self.active:
            return
        elif kind == "broker":
            self.post("brokers")
        elif kind == "topic":
            self.post("topic", key)
        elif kind == "delete_topic":
            self.post("delete", key)
        elif kind == "controlled_shutdown":
            self.post("shutdown", key)

    async def _run(self) -> None:
        while True:
            kind, key = await self._queue.get()
            try:
                await self._handle(kind, key)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("controller event %s %r failed", kind, key)
                await self.clock.sleep(0.5)
                if kind == "elect":
                    self.post("elect")
                elif self.active and kind != "resign":
                    self.post(kind, key)

    async def _handle(self, kind: str, key: Any) -> None:
        if kind == "elect":
            await self._elect()
        elif kind == "resign":
            if self.active and self.store.controller_id() != self.broker_id:
                log.info("broker %d is no longer the controller", self.broker_id)
                self.active = False
        elif not self.active:
            return
        elif kind == "failover":
            await self._on_failover()
        elif kind == "brokers":
            await self._on_broker_change()
        elif kind == "topic":
            await self._on_topic_change(key)
        elif kind == "delete":
            await self._on_delete(key)
        elif kind == "shutdown":
            await self._on_controlled_shutdown(key)
        elif kind == "rebalance":
            await self._rebalance()

    # -- election ----------------------------------------------------------------------

    async def _elect(self) -> None:
        if self.active and self.store.controller_id() == self.broker_id:
            return
        if self.store.controller_id() not in (-1, self.broker_id):
            return
        result = await self.store.try_become_controller()
        if result is None:
            return
        self.epoch, self.epoch_version = result
        self.active = True
        log.info("broker %d is the controller (epoch %d)", self.broker_id, self.epoch)
        self._known_live = set()
        await self._on_failover()
        if self.settings.auto_leader_rebalance and self._rebalance_task is None:
            self._rebalance_task = asyncio.get_running_loop().create_task(self._rebalance_timer())

    async def _rebalance_timer(self) -> None:
        while True:
            await self.clock.sleep(self.settings.imbalance_check_interval_s)
            if self.active:
                self.post("rebalance")

    async def _on_failover(self) -> None:
        for topic in self.store.topics():
            await self._on_topic_change(topic)
        await self._on_broker_change()
        for topic in self.store.delete_requests():
            await self._on_delete(topic)
        for broker_id in self.store.shutdown_requests():
            await self._on_controlled_shutdown(broker_id)

    # -- helpers -----------------------------------------------------------------------

    def _live(self) -> set[int]:
        """Brokers that may lead: registered and not shutting down."""
        return set(self.store.live_broker_ids()) - set(self.store.shutdown_requests())

    def _unclean_allowed(self, topic: str) -> bool:
        info = self.store.get_topic(topic)
        value = info.configs.get("unclean.leader.election.enable") if info is not None else None
        if value is not None:
            return str(value).strip().lower() == "true"
        return self.settings.unclean_leader_election

    async def _write(self, changes: list[StateChange]) -> None:
        if not changes:
            return
        results = await self.store.write_states_as_controller(changes, self.epoch_version)
        failed = False
        for topic, partition, state, _expected in changes:
            result = results[(topic, partition)]
            if isinstance(result, Exception):
                failed = True
                log.info("controller: writing the state of %s-%d failed: %r; re-reading", topic, partition, result)
                with contextlib.suppress(Exception):
                    await self.store.read_state(topic, partition)
            else:
                log.info("controller: %s-%d leader %d epoch %d ISR %s", topic, partition,
                         state.leader, state.leader_epoch, list(state.isr))
        if failed:
            # Either a leader changed its ISR meanwhile (try again on the fresh view) or
            # the epoch check failed because another controller took over (stop).
            if await self._still_controller():
                await self.clock.sleep(0.05)
                self.post("brokers")
            else:
                log.info("broker %d lost the controller epoch %d", self.broker_id, self.epoch)
                self.active = False

    async def _still_controller(self) -> bool:
        try:
            return bool(await self.store.controller_epoch() == self.epoch)
        except Exception:  # noqa: BLE001 - unreachable ZooKeeper: assume deposed, re-elect later
            return False

    def _new_state(self, old: PartitionState, leader: int, isr: Iterable[int], bump: bool) -> PartitionState:
        return PartitionState(leader, old.leader_epoch + (1 if bump else 0), tuple(isr), self.epoch)

    # -- events ------------------------------------------------------------------------

    async def _on_topic_change(self, topic: str) -> None:
        info = self.store.get_topic(topic)
        if info is None or topic in self.store.delete_requests():
            return
        live = self._live()
        changes: list[StateChange] = []
        for partition, replicas in sorted(info.assignment.items()):
            if self.store.partition_state(topic, partition) is not None:
                continue
            alive = [r for r in replicas if r in live]
            leader = alive[0] if alive else NO_LEADER
            changes.append((topic, partition, PartitionState(leader, 0, tuple(alive), self.epoch), None))
        await self._write(changes)

    async def _on_broker_change(self) -> None:
        live = self._live()
        registered = self.store.live_broker_ids()
        dead = (self._known_live - registered) if self._known_live else set()
        joined = registered - self._known_live
        self._known_live = set(registered)
        if dead:
            log.info("controller: brokers %s left the cluster", sorted(dead))
        if joined:
            log.info("controller: brokers %s are live", sorted(joined))
        changes: list[StateChange] = []
        for (topic, partition), state in sorted(self.store.partition_states().items()):
            info = self.store.get_topic(topic)
            if info is None:
                continue
            replicas = info.replicas(partition, NO_LEADER)
            # A broker that registered again after this state was written restarted (or
            # lost its session): it counts as dead here, so it leaves the ISR and loses
            # leadership unless nobody else can take it (Kafka's broker epochs).
            bounced = set()
            if state.leader != NO_LEADER:  # (an offline partition waits for exactly that)
                bounced = {b for b in registered if 0 <= state.zxid < self.store.broker_epoch(b)}
            change = self._elect_if_needed(topic, state, replicas, live - bounced, registered - bounced)
            if change is not None and change.leader == NO_LEADER:
                comeback = [r for r in replicas if r in bounced and r in state.isr and r in live]
                if comeback:  # nobody else can lead: the restarted ISR member does
                    isr = [r for r in state.isr if r in registered]
                    change = self._new_state(state, comeback[0], isr, True)
            if change is not None:
                changes.append((topic, partition, change, state.version))
        await self._write(changes)

    def _elect_if_needed(self, topic: str, state: PartitionState, replicas: tuple[int, ...],
                         live: set[int], registered: set[int]) -> PartitionState | None:
        isr_live = [r for r in state.isr if r in registered]
        if state.leader != NO_LEADER and state.leader in registered:
            # (A leader that is shutting down is moved by the controlled shutdown, which
            # knows when nobody can take over.)
            if len(isr_live) == len(state.isr):
                return None
            # A follower died: it leaves the ISR; the leader stays.
            return self._new_state(state, state.leader, [r for r in state.isr if r in registered], False)
        # The leader is gone (or there is none): pick the first live ISR member in
        # assignment order.
        candidates = [r for r in replicas if r in state.isr and r in live]
        if candidates:
            leader = candidates[0]
            isr = [r for r in state.isr if r in registered]
            return self._new_state(state, leader, isr, True)
        if not state.isr:
            # A new partition whose replicas were all down at creation: any live replica.
            alive = [r for r in replicas if r in live]
            if alive:
                return self._new_state(state, alive[0], alive, True)
            return None
        if self._unclean_allowed(topic):
            alive = [r for r in replicas if r in live]
            if alive:
                log.warning("controller: unclean election of %d for %s (ISR %s is down)", alive[0], topic,
                            list(state.isr))
                return self._new_state(state, alive[0], [alive[0]], True)
        if state.leader == NO_LEADER:
            return None
        # No live ISR member: no leader; the last ISR member stays in the ISR.
        isr = [r for r in state.isr if r != state.leader] or list(state.isr)
        if len(state.isr) == 1:
            isr = list(state.isr)
        log.warning("controller: %s partition has no live in-sync replica (ISR %s): offline", topic,
                    list(state.isr))
        return self._new_state(state, NO_LEADER, isr, True)

    async def _on_delete(self, topic: str) -> None:
        if topic not in self.store.delete_requests():
            return
        log.info("controller: deleting topic %s", topic)
        await self.store.delete_topic_znodes(topic)

    async def _on_controlled_shutdown(self, broker_id: int) -> None:
        requests = self.store.shutdown_requests()
        if broker_id not in requests or requests[broker_id] != b"{}":
            return  # gone, or already answered
        live = self._live()
        changes: list[StateChange] = []
        remaining = moved = 0
        for (topic, partition), state in sorted(self.store.partition_states().items()):
            info = self.store.get_topic(topic)
            if info is None or broker_id not in state.isr and state.leader != broker_id:
                continue
            replicas = info.replicas(partition, NO_LEADER)
            if state.leader == broker_id:
                candidates = [r for r in replicas if r in state.isr and r in live and r != broker_id]
                if not candidates:
                    remaining += 1  # nobody to take over: it stays until the broker goes
                    continue
                isr = [r for r in state.isr if r != broker_id]
                changes.append((topic, partition, self._new_state(state, candidates[0], isr, True), state.version))
                moved += 1
            elif len(state.isr) > 1:
                isr = [r for r in state.isr if r != broker_id]
                changes.append((topic, partition, self._new_state(state, state.leader, isr, False), state.version))
        await self._write(changes)
        log.info("controller: controlled shutdown of broker %d: %d leaderships moved, %d stay",
                 broker_id, moved, remaining)
        await self.store.mark_shutdown_processed(broker_id, remaining)

    async def _rebalance(self) -> None:
        live = self._live()
        preferred: dict[int, list[tuple[str, int, PartitionState]]] = {}
        for (topic, partition), state in self.store.partition_states().items():
            info = self.store.get_topic(topic)
            if info is None:
                continue
            replicas = info.replicas(partition, NO_LEADER)
            if replicas and replicas[0] != NO_LEADER:
                preferred.setdefault(replicas[0], []).append((topic, partition, state))
        changes: list[StateChange] = []
        for broker_id, entries in preferred.items():
            if broker_id not in live:
                continue
            not_led = [(t, p, s) for t, p, s in entries if s.leader != broker_id]
            ratio = len(not_led) / len(entries)
            if ratio * 100 <= self.settings.imbalance_per_broker_percentage:
                continue
            for topic, partition, state in not_led:
                if broker_id in state.isr:
                    changes.append((topic, partition, self._new_state(state, broker_id, state.isr, True), state.version))
        if changes:
            log.info("controller: preferred leader election for %d partitions", len(changes))
        await self._write(changes)
