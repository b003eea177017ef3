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
  them back when it is in their ISR;
- partition reassignment (AlterPartitionReassignments, KIP-455): the topic znode gets
  the union of the original and target replicas with the ones being added and removed;
  the new replicas see themselves in the assignment and fetch from the leader, which
  adds them to the ISR once they caught up. When every target replica is in the ISR (a
  state change: ``_advance_reassignments``), one transaction writes the state (a leader
  from the target set if the current one leaves, the removed replicas out of the ISR)
  and the assignment shrunk to the target; the removed brokers then stop and delete
  their replicas. The move lives in ZooKeeper, so a new controller carries it on.
  Cancelling (null replicas) is a move back to the original replicas; the added ones
  leave the assignment and the ISR at once;
- leader elections asked for by an admin (ElectLeaders, KIP-460): the preferred replica
  when it is alive and in sync, or (unclean) a live replica of a partition without a
  live leader.

Admin requests run as controller events too (``request``), in order with the others, and
answer NOT_CONTROLLER on a broker that is not the active controller.

Leader election from the ISR only unless ``unclean.leader.election.enable`` (broker or
topic config); a partition whose ISR has no live member keeps its last ISR member in the
ISR with no leader, so it comes back cleanly when that broker returns (Kafka's rule).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, cast

from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.cluster.metadata import (
    NO_LEADER,
    ClusterView,
    PartitionAssignment,
    PartitionState,
    TopicStore,
)
from pykfk.errors import ErrorCode, KafkaError

log = logging.getLogger("pykfk.cluster")

# (topic, partition, new state, expected znode version or None for a new state)
StateChange = tuple[str, int, PartitionState, int | None]
TopicPartition = tuple[str, int]

# ElectLeaders election types (KIP-460).
PREFERRED, UNCLEAN = 0, 1
# What ElectLeaders answers for one partition: an error code and its message.
ElectionOutcome = tuple[ErrorCode, str | None]
_ELECTION_MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader is not alive or not in the ISR.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "No live replica of the partition can be elected.",
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: "The partition does not exist.",
    ErrorCode.INVALID_TOPIC_EXCEPTION: "The topic is being deleted.",
}
# Controller events that answer an admin request through a future.
_REQUESTS = ("alter_reassignments", "elect_leaders", "list_reassignments")
# Attempts at a write that lost a race with a leader's ISR change before giving up.
_WRITE_ATTEMPTS = 5


class ControllerStore(ClusterView, Protocol):
    """What the controller of a ZooKeeper cluster reads and writes besides the cluster
    view: its office (``/controller``, ``/controller_epoch``), state and assignment
    writes fenced by the controller epoch, and the requests it answers (deletions,
    controlled shutdowns). ``ZooKeeperMetadataStore`` is one."""

    def partition_states(self) -> dict[TopicPartition, PartitionState]: ...

    def broker_epoch(self, broker_id: int) -> int:
        """The store transaction of the broker's current registration (-1: none)."""
        ...

    async def try_become_controller(self) -> tuple[int, int] | None:
        """(controller epoch, its znode version) when this broker took the office."""
        ...

    async def controller_epoch(self) -> int: ...

    async def resign_controller(self) -> None: ...

    async def write_states_as_controller(
        self, changes: Sequence[StateChange], epoch_version: int
    ) -> dict[TopicPartition, PartitionState | BaseException]: ...

    async def write_reassignment_as_controller(
        self, topic: str, partitions: Mapping[int, PartitionAssignment], states: Sequence[StateChange],
        epoch_version: int,
    ) -> None: ...

    async def read_topic(self, topic: str) -> None: ...

    async def delete_topic_znodes(self, topic: str) -> None: ...

    async def mark_shutdown_processed(self, broker_id: int, remaining: int) -> None: ...


class ClusterController(Protocol):
    """The controller role as the rest of the broker sees it: ``Controller`` in a
    ZooKeeper cluster (active while this broker holds the office), ``LocalController``
    (``local_controller.py``) in a cluster of one, which is its own controller."""

    # True while this broker is the active controller: admin requests go to it.
    active: bool
    # Leaders this controller chose (all of them; those outside the ISR), for the metrics.
    leader_elections: int
    unclean_leader_elections: int
    # Whether a log of a topic the store does not know is deleted at start: in a cluster
    # the topic was deleted while this broker was down; in a cluster of one, whose
    # deletions remove the logs before they return, the metadata file was lost, and the
    # data is kept (not served).
    deletes_stray_logs: bool

    def start(self) -> None:
        """Run for the office (after this broker registered)."""
        ...

    async def stop(self) -> None: ...

    def post(self, kind: str, key: Any = None) -> None:
        """A controller event (``"elect"`` after a new session)."""
        ...

    def internal_topic_replication_factor(self, topic: str, configured: int) -> int:
        """The replication factor an internal topic is created with: ``configured``, or
        fewer when fewer brokers are up."""
        ...

    async def alter_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                                  allow_replication_factor_change: bool,
                                  timeout_s: float) -> dict[TopicPartition, KafkaError | None]: ...

    async def elect_leaders(self, election_type: int, partitions: Sequence[TopicPartition] | None,
                            timeout_s: float) -> dict[TopicPartition, ElectionOutcome]: ...

    async def list_reassignments(self, partitions: Sequence[TopicPartition] | None,
                                 timeout_s: float) -> dict[TopicPartition, PartitionAssignment]: ...


def preferred_election(replicas: Sequence[int], state: PartitionState, live: set[int],
                       controller_epoch: int) -> tuple[ErrorCode, PartitionState | None]:
    """Kafka's preferred-replica election: the first replica of the assignment leads when
    it is alive and in the ISR."""
    preferred = replicas[0] if replicas else NO_LEADER
    if state.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    if preferred in live and preferred in state.isr:
        return ErrorCode.NONE, PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch)
    return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, None


def unclean_election(replicas: Sequence[int], state: PartitionState, live: set[int], registered: set[int],
                     controller_epoch: int) -> tuple[ErrorCode, PartitionState | None]:
    """An election for a partition without a live leader: a live ISR member if there is
    one, else any live replica (which may lack committed records: unclean)."""
    if state.leader != NO_LEADER and state.leader in registered:
        return ErrorCode.ELECTION_NOT_NEEDED, None
    in_sync = [r for r in replicas if r in state.isr and r in live]
    if in_sync:
        isr = tuple(r for r in state.isr if r in registered)
        return ErrorCode.NONE, PartitionState(in_sync[0], state.leader_epoch + 1, isr, controller_epoch)
    alive = [r for r in replicas if r in live]
    if not alive:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE, None
    return ErrorCode.NONE, PartitionState(alive[0], state.leader_epoch + 1, (alive[0],), controller_epoch)


def decide_election(store: TopicStore, election_type: int, topic: str, partition: int, live: set[int],
                    registered: set[int], controller_epoch: int,
                    default_replica: int = NO_LEADER) -> tuple[ErrorCode, PartitionState | None]:
    """ElectLeaders for one partition: the error code, and the new state to write
    (``default_replica``: the replica of a partition without an assignment)."""
    info = store.get_topic(topic)
    state = store.partition_state(topic, partition)
    if info is None or state is None or not 0 <= partition < info.partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
    if topic in store.delete_requests():
        return ErrorCode.INVALID_TOPIC_EXCEPTION, None
    replicas = info.replicas(partition, default_replica)
    if election_type == PREFERRED:
        return preferred_election(replicas, state, live, controller_epoch)
    if election_type == UNCLEAN:
        return unclean_election(replicas, state, live, registered, controller_epoch)
    return ErrorCode.INVALID_REQUEST, None


def election_outcome(code: ErrorCode, topic: str, partition: int) -> ElectionOutcome:
    if code == ErrorCode.NONE:
        return code, None
    return code, f"{topic}-{partition}: {_ELECTION_MESSAGES.get(code, code.name)}"


def check_reassignment(target: Sequence[int], current: PartitionAssignment, registered: set[int],
                       allow_replication_factor_change: bool) -> None:
    """Kafka's checks of a new replica set (``KafkaController.validateReplicas``)."""
    if not target:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Empty replica list specified in partition reassignment.")
    if len(set(target)) != len(target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Duplicate replica ids in partition reassignment replica list: {list(target)}")
    if any(r < 0 for r in target):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid broker id in replica list: {list(target)}")
    adding = current.reassigned_to(target).adding
    if not set(adding) <= registered:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                         f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
                         f"live broker list: {sorted(registered)}")
    if not allow_replication_factor_change and len(target) != len(current.original):
        raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                         f"The replication factor is changed from {len(current.original)} to {len(target)} "
                         "but allowReplicationFactorChange is false")


def reassignment_target(store: TopicStore, topic: str, partition: int, target: Sequence[int] | None,
                        registered: set[int], allow_replication_factor_change: bool,
                        default_replica: int = NO_LEADER) -> tuple[int, ...]:
    """The replicas a partition is to move to (its original ones for a cancellation, a
    null target); KafkaError with Kafka's code when the request cannot be done."""
    info = store.get_topic(topic)
    if info is None or not 0 <= partition < info.partitions or topic in store.delete_requests():
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}-{partition}.")
    current = info.partition_assignment(partition, default_replica)
    if target is None:
        if not current.reassigning:
            raise KafkaError(ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, f"No reassignment of {topic}-{partition} to cancel.")
        return tuple(current.original)
    check_reassignment(target, current, registered, allow_replication_factor_change)
    return tuple(target)


def without_replicas(state: PartitionState, gone: Sequence[int], replicas: Sequence[int], live: set[int],
                     controller_epoch: int) -> PartitionState | None:
    """The state once ``gone`` are no replicas any more: out of the ISR, and a new leader
    from the remaining in-sync ``replicas`` if the leader is one of them."""
    if not set(gone) & ({state.leader} | set(state.isr)):
        return None
    isr = tuple(r for r in state.isr if r not in gone)
    if state.leader not in gone:
        return PartitionState(state.leader, state.leader_epoch, isr, controller_epoch)
    candidates = [r for r in replicas if r in isr and r in live]
    leader = candidates[0] if candidates else NO_LEADER
    return PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch)


def completed_move(moving: PartitionAssignment, state: PartitionState, live: set[int], registered: set[int],
                   controller_epoch: int) -> tuple[PartitionAssignment, PartitionState | None] | None:
    """The end of a move once every target replica is in the ISR: the assignment shrunk
    to the target and the state without the removed replicas, led by a target replica
    (the current leader when it stays, at the same epoch). None while it must wait."""
    target = moving.target
    if not set(target) <= set(state.isr):
        return None
    isr = tuple(r for r in state.isr if r in target)
    if state.leader in target and state.leader in registered:
        same = isr == state.isr
        return PartitionAssignment(target), None if same else PartitionState(
            state.leader, state.leader_epoch, isr, controller_epoch)
    candidates = [r for r in target if r in live]
    if not candidates:
        return None
    return PartitionAssignment(target), PartitionState(candidates[0], state.leader_epoch + 1, isr, controller_epoch)


class ControllerSettings:
    def __init__(self, **kw: Any):
        self.unclean_leader_election: bool = kw.get("unclean_leader_election", False)
        self.auto_leader_rebalance: bool = kw.get("auto_leader_rebalance", True)
        self.imbalance_check_interval_s: float = kw.get("imbalance_check_interval_s", 300)
        self.imbalance_per_broker_percentage: int = kw.get("imbalance_per_broker_percentage", 10)


class Controller:
    """Loop-affine. ``start()`` after the broker registered; ``stop()`` at shutdown."""

    # A cluster's topics are deleted by the controller, also while some replicas are down.
    deletes_stray_logs = True

    def __init__(self, broker_id: int, store: ControllerStore, settings: ControllerSettings, *,
                 clock: Clock = SYSTEM_CLOCK):
        self.broker_id = broker_id
        self.store = store
        self.settings = settings
        self.clock = clock
        self.epoch = -1
        self.epoch_version = -1
        self.active = False
        # Leaders this controller chose (Kafka's LeaderElectionRateAndTimeMs and
        # UncleanLeaderElectionsPerSec), for the broker metrics.
        self.leader_elections = 0
        self.unclean_leader_elections = 0
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
        self._fail_pending_requests()
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
        elif kind == "partition" and self._leader_left_isr(*key):
            self.post("orphaned", key)  # its leader's log dir failed: elect another
        elif kind == "partition" and self._moving(*key):
            self.post("reassignment", key[0])  # maybe the ISR the move waits for

    def _leader_left_isr(self, topic: str, partition: int) -> bool:
        state = self.store.partition_state(topic, partition)
        return state is not None and state.leader != NO_LEADER and state.leader not in state.isr

    def _moving(self, topic: str, partition: int) -> bool:
        info = self.store.get_topic(topic)
        return info is not None and (partition in info.adding_replicas or partition in info.removing_replicas)

    async def _run(self) -> None:
        while True:
            kind, key = await self._queue.get()
            if kind in _REQUESTS:
                await self._answer(kind, *key)
                continue
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
        elif kind == "reassignment":
            await self._advance_reassignments(key)
        elif kind == "orphaned":
            await self._on_leader_left_isr(*key)

    # -- admin requests ----------------------------------------------------------------

    async def request(self, kind: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        """Run an admin request as one controller event, in order with the others.
        KafkaError NOT_CONTROLLER on a broker that is not the active controller,
        REQUEST_TIMED_OUT when it did not run within ``timeout_s``."""
        if not self.active or self._stopped:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is not the controller")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait((kind, (args, future)))
        try:
            return await asyncio.wait_for(future, max(timeout_s, 0.001))
        except asyncio.TimeoutError:
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the controller did not answer within {timeout_s}s") from None

    def _fail_pending_requests(self) -> None:
        """At stop: admin requests still queued answer NOT_CONTROLLER now."""
        while not self._queue.empty():
            kind, key = self._queue.get_nowait()
            if kind in _REQUESTS and not key[1].done():
                key[1].set_exception(KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is stopping"))

    async def _answer(self, kind: str, args: tuple[Any, ...], future: asyncio.Future[Any]) -> None:
        if future.done():
            return  # the caller gave up
        try:
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is no longer the controller")
            if kind == "alter_reassignments":
                result: Any = await self._alter_reassignments(*args)
            elif kind == "elect_leaders":
                result = await self._elect_leaders(*args)
            else:
                result = self._list_reassignments(*args)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the request
            if not future.done():
                future.set_exception(exc)
        else:
            if not future.done():
                future.set_result(result)

    async def alter_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                                  allow_replication_factor_change: bool,
                                  timeout_s: float) -> dict[TopicPartition, KafkaError | None]:
        """AlterPartitionReassignments: start (or, with None, cancel) moves; per
        partition None when accepted, else the KafkaError to answer."""
        result = await self.request("alter_reassignments", (targets, allow_replication_factor_change), timeout_s)
        return cast(dict[TopicPartition, KafkaError | None], result)

    async def elect_leaders(self, election_type: int, partitions: Sequence[TopicPartition] | None,
                            timeout_s: float) -> dict[TopicPartition, ElectionOutcome]:
        """ElectLeaders for ``partitions`` (every partition when None)."""
        result = await self.request("elect_leaders", (election_type, partitions), timeout_s)
        return cast(dict[TopicPartition, ElectionOutcome], result)

    async def list_reassignments(self, partitions: Sequence[TopicPartition] | None,
                                 timeout_s: float) -> dict[TopicPartition, PartitionAssignment]:
        """ListPartitionReassignments: the moves under way (of ``partitions`` when given).
        An event too, so it sees every move this controller finished before it."""
        result = await self.request("list_reassignments", (partitions,), timeout_s)
        return cast(dict[TopicPartition, PartitionAssignment], result)

    def internal_topic_replication_factor(self, topic: str, configured: int) -> int:
        live = len(self.store.live_broker_ids())
        factor = min(configured, live)
        if factor < configured:
            log.warning("creating %s with replication factor %d: only %d brokers are up", topic, factor, live)
        return factor

    def _list_reassignments(self, partitions: Sequence[TopicPartition] | None) -> dict[TopicPartition, PartitionAssignment]:
        wanted = None if partitions is None else set(partitions)
        ongoing: dict[TopicPartition, PartitionAssignment] = {}
        for topic, info in self.store.topics().items():
            for partition in info.reassigning_partitions():
                if wanted is None or (topic, partition) in wanted:
                    ongoing[(topic, partition)] = info.partition_assignment(partition, NO_LEADER)
        return ongoing

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
        if bump and leader != NO_LEADER:
            self.leader_elections += 1
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
        await self._advance_reassignments(topic)

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
        if state.leader != NO_LEADER and state.leader in registered and state.leader in state.isr:
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
                self.unclean_leader_elections += 1
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

    async def _on_leader_left_isr(self, topic: str, partition: int) -> None:
        """A leader wrote itself out of the ISR (its log dir went offline, KIP-112's
        notification): another live ISR member leads, as when a leader dies."""
        info = self.store.get_topic(topic)
        state = self.store.partition_state(topic, partition)
        if info is None or state is None or not self._leader_left_isr(topic, partition):
            return
        change = self._elect_if_needed(topic, state, info.replicas(partition, NO_LEADER), self._live(),
                                       set(self.store.live_broker_ids()))
        if change is not None:
            log.info("controller: %s-%d: leader %d left the ISR %s", topic, partition, state.leader, list(state.isr))
            await self._write([(topic, partition, change, state.version)])

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

    # -- partition reassignment ----------------------------------------------------------

    async def _alter_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                                   allow_replication_factor_change: bool) -> dict[TopicPartition, KafkaError | None]:
        results: dict[TopicPartition, KafkaError | None] = {}
        accepted: dict[str, dict[int, tuple[int, ...]]] = {}
        registered = set(self.store.live_broker_ids())
        for (topic, partition), target in targets.items():
            try:
                resolved = reassignment_target(self.store, topic, partition, target, registered,
                                               allow_replication_factor_change)
            except KafkaError as exc:
                results[(topic, partition)] = exc
                continue
            accepted.setdefault(topic, {})[partition] = resolved
            results[(topic, partition)] = None
        for topic, moves in accepted.items():
            try:
                await self._start_moves(topic, moves)
            except KafkaError as exc:
                results.update({(topic, p): exc for p in moves})
        return results

    async def _start_moves(self, topic: str, targets: Mapping[int, tuple[int, ...]]) -> None:
        """Record the moves of ``topic``'s partitions in its znode; replicas that leave
        at once (an added replica of a cancelled move) leave the ISR in the same write."""
        for _attempt in range(_WRITE_ATTEMPTS):
            info = self.store.get_topic(topic)
            if info is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic} was deleted")
            live = self._live()
            moves: dict[int, PartitionAssignment] = {}
            changes: list[StateChange] = []
            for partition, target in targets.items():
                current = info.partition_assignment(partition, NO_LEADER)
                move = current.reassigned_to(target)
                if move == current:
                    continue
                moves[partition] = move
                state = self.store.partition_state(topic, partition)
                gone = [r for r in current.replicas if r not in move.replicas]
                new_state = None if state is None else without_replicas(state, gone, move.replicas, live, self.epoch)
                if state is not None and new_state is not None:
                    changes.append((topic, partition, new_state, state.version))
            if not moves:
                return
            if await self._write_moves(topic, moves, changes):
                for partition, move in moves.items():
                    log.info("controller: moving %s-%d to %s (adding %s, removing %s)", topic, partition,
                             list(move.target), list(move.adding), list(move.removing))
                await self._advance_reassignments(topic)
                return
            if not self.active:
                raise KafkaError(ErrorCode.NOT_CONTROLLER, f"broker {self.broker_id} is no longer the controller")
        raise KafkaError(ErrorCode.REQUEST_TIMED_OUT, f"the replicas of {topic} kept changing; try again")

    async def _advance_reassignments(self, topic: str) -> None:
        """Complete the moves of ``topic`` whose target replicas are all in sync."""
        info = self.store.get_topic(topic)
        if info is None or not info.reassigning_partitions():
            return
        live, registered = self._live(), set(self.store.live_broker_ids())
        done: dict[int, PartitionAssignment] = {}
        changes: list[StateChange] = []
        for partition in info.reassigning_partitions():
            state = self.store.partition_state(topic, partition)
            step = None if state is None else completed_move(
                info.partition_assignment(partition, NO_LEADER), state, live, registered, self.epoch)
            if state is None or step is None:
                continue
            done[partition], new_state = step
            if new_state is not None:
                changes.append((topic, partition, new_state, state.version))
        if not done:
            return
        if await self._write_moves(topic, done, changes):
            for partition, assignment in done.items():
                log.info("controller: %s-%d moved to %s", topic, partition, list(assignment.replicas))
        elif self.active:
            await self.clock.sleep(0.05)
            self.post("reassignment", topic)

    async def _write_moves(self, topic: str, moves: Mapping[int, PartitionAssignment],
                           changes: list[StateChange]) -> bool:
        """One fenced transaction; False (with the view re-read, or this controller
        deposed) when it lost a race."""
        try:
            await self.store.write_reassignment_as_controller(topic, moves, changes, self.epoch_version)
            return True
        except Exception as exc:  # noqa: BLE001 - a conflict or ZooKeeper trouble: re-read
            log.info("controller: writing the replicas of %s failed: %r; re-reading", topic, exc)
        with contextlib.suppress(Exception):
            await self.store.read_topic(topic)
            for partition in moves:
                await self.store.read_state(topic, partition)
        if not await self._still_controller():
            log.info("broker %d lost the controller epoch %d", self.broker_id, self.epoch)
            self.active = False
        return False

    # -- leader elections asked for by an admin ----------------------------------------

    async def _elect_leaders(self, election_type: int,
                             partitions: Sequence[TopicPartition] | None) -> dict[TopicPartition, ElectionOutcome]:
        pending = sorted(self.store.partition_states()) if partitions is None else list(dict.fromkeys(partitions))
        outcomes: dict[TopicPartition, ElectionOutcome] = {}
        for _attempt in range(_WRITE_ATTEMPTS):
            live, registered = self._live(), set(self.store.live_broker_ids())
            changes: list[StateChange] = []
            for topic, partition in pending:
                code, new_state = decide_election(self.store, election_type, topic, partition, live, registered,
                                                  self.epoch)
                outcomes[(topic, partition)] = election_outcome(code, topic, partition)
                state = self.store.partition_state(topic, partition)
                if new_state is not None and state is not None:
                    changes.append((topic, partition, new_state, state.version))
            pending = await self._write_elections(changes, outcomes)
            if not pending or not self.active:
                break
        return outcomes

    async def _write_elections(self, changes: list[StateChange],
                               outcomes: dict[TopicPartition, ElectionOutcome]) -> list[TopicPartition]:
        """Write elected leaders; returns the partitions to decide again (their state
        changed meanwhile), having marked them failed for now."""
        if not changes:
            return []
        results = await self.store.write_states_as_controller(changes, self.epoch_version)
        failed = [(t, p) for t, p, _state, _expected in changes if isinstance(results[(t, p)], BaseException)]
        for topic, partition, state, _expected in changes:
            if (topic, partition) not in failed:
                log.info("controller: elected %d leader of %s-%d (epoch %d)", state.leader, topic, partition,
                         state.leader_epoch)
        if not failed:
            return []
        deposed = not await self._still_controller()
        for topic, partition in failed:
            outcomes[(topic, partition)] = (ErrorCode.NOT_CONTROLLER if deposed else ErrorCode.REQUEST_TIMED_OUT,
                                            f"{topic}-{partition}: the election could not be written")
            with contextlib.suppress(Exception):
                await self.store.read_state(topic, partition)
        if deposed:
            self.active = False
            return []
        return failed
