"""An in-memory metadata store for unit tests of cluster logic (no I/O to fake away but
ZooKeeper's): topics with replica assignments, partition states with znode-like
versions and conditional updates, live brokers, the controller znodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError

from pykfk.cluster.metadata import (
    BrokerInfo,
    PartitionAssignment,
    PartitionState,
    TopicInfo,
    notify_listeners,
)


class FakeStore:
    """The store methods the replica manager and the controller call, in memory."""

    def __init__(self, me: int, brokers: Sequence[int]):
        self.broker = BrokerInfo(me, "127.0.0.1", 9092 + me)
        self.registration_zxid = 0
        self.cluster_id = "fake-cluster"
        self._brokers = {b: BrokerInfo(b, "127.0.0.1", 9092 + b) for b in brokers}
        self._topics: dict[str, TopicInfo] = {}
        self._states: dict[tuple[str, int], PartitionState] = {}
        self._shutdown_requests: dict[int, bytes] = {}
        self._listeners: list[Callable[[str, Any], None]] = []
        self.isr_writes: list[tuple[str, int, tuple[int, ...]]] = []
        self._zxid = 1
        self._controller = -1
        self.controller_epoch_value = 0
        self.controller_epoch_version = 0
        self._delete_requests: set[str] = set()
        self.processed_shutdowns: dict[int, int] = {}
        self.reassignment_writes = 0

    # -- test controls -----------------------------------------------------------------

    def add_topic(self, name: str, assignment: Mapping[int, Sequence[int]], configs: Mapping[str, str] | None = None,
                  *, adding: Mapping[int, tuple[int, ...]] | None = None,
                  removing: Mapping[int, tuple[int, ...]] | None = None) -> None:
        """Create or replace a topic (its znode), with moves under way if given."""
        replicas = {p: tuple(r) for p, r in assignment.items()}
        self._topics[name] = TopicInfo(name, len(replicas), len(next(iter(replicas.values()))),
                                       dict(configs or {}), name, replicas, dict(adding or {}), dict(removing or {}))
        self._notify("topic", name)

    def request_deletion(self, name: str) -> None:
        self._delete_requests.add(name)
        self._notify("delete_topic", name)

    def request_shutdown(self, broker_id: int) -> None:
        self._shutdown_requests[broker_id] = b"{}"
        self._notify("controlled_shutdown", broker_id)


    def set_state(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: Sequence[int],
                  controller_epoch: int = 1) -> PartitionState:
        """A controller's write: the next znode version."""
        old = self._states.get((topic, partition))
        self._zxid += 1
        state = PartitionState(leader, leader_epoch, tuple(isr), controller_epoch,
                               0 if old is None else old.version + 1, self._zxid)
        self._states[(topic, partition)] = state
        self._notify("partition", (topic, partition))
        return state

    def kill(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)
        self._notify("broker", broker_id)

    # -- MetadataStore -------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        return [self._brokers[b] for b in sorted(self._brokers)]

    def get_broker(self, broker_id: int) -> BrokerInfo | None:
        # Reachable as a registration, never over a socket: fetchers back off.
        return None

    def live_broker_ids(self) -> set[int]:
        return set(self._brokers)

    def shutdown_requests(self) -> dict[int, bytes]:
        return dict(self._shutdown_requests)

    def controller_id(self) -> int:
        return self._controller

    def broker_epoch(self, broker_id: int) -> int:
        return 0 if broker_id in self._brokers else -1

    def partition_states(self) -> dict[tuple[str, int], PartitionState]:
        return dict(self._states)

    def delete_requests(self) -> set[str]:
        return set(self._delete_requests)

    # -- the controller's znodes ---------------------------------------------------------

    async def try_become_controller(self) -> tuple[int, int] | None:
        if self._controller != -1:
            return None
        self._controller = self.broker.node_id
        self.controller_epoch_value += 1
        self.controller_epoch_version += 1
        return self.controller_epoch_value, self.controller_epoch_version

    async def controller_epoch(self) -> int:
        return self.controller_epoch_value

    async def resign_controller(self) -> None:
        if self._controller == self.broker.node_id:
            self._controller = -1

    async def write_states_as_controller(
        self, changes: Sequence[tuple[str, int, PartitionState, int | None]], epoch_version: int
    ) -> dict[tuple[str, int], PartitionState | BaseException]:
        """Each write checks the controller epoch's version and the state's version."""
        results: dict[tuple[str, int], PartitionState | BaseException] = {}
        for topic, partition, state, expected in changes:
            current = self._states.get((topic, partition))
            if epoch_version != self.controller_epoch_version or (
                    expected is not None and (current is None or current.version != expected)):
                results[(topic, partition)] = BadVersionError()
                continue
            results[(topic, partition)] = self.set_state(
                topic, partition, state.leader, state.leader_epoch, state.isr, state.controller_epoch)
        return results

    async def write_reassignment_as_controller(
        self, topic: str, partitions: Mapping[int, PartitionAssignment],
        states: Sequence[tuple[str, int, PartitionState, int | None]], epoch_version: int,
    ) -> None:
        """The topic's assignment and the states in one step, checked like a transaction."""
        info = self._topics[topic]
        if epoch_version != self.controller_epoch_version or any(
                (current := self._states.get((t, p))) is None or current.version != expected
                for t, p, _state, expected in states):
            raise BadVersionError()
        self.reassignment_writes += 1
        assignment, adding, removing = dict(info.assignment), dict(info.adding_replicas), dict(info.removing_replicas)
        for partition, moved in partitions.items():
            assignment[partition] = moved.replicas
            for table, replicas in ((adding, moved.adding), (removing, moved.removing)):
                table.pop(partition, None)
                if replicas:
                    table[partition] = replicas
        for t, p, state, _expected in states:
            self.set_state(t, p, state.leader, state.leader_epoch, state.isr, state.controller_epoch)
        self.add_topic(topic, assignment, info.configs, adding=adding, removing=removing)

    async def read_topic(self, topic: str) -> None:
        """The view is always current here."""

    async def delete_topic_znodes(self, topic: str) -> None:
        self._topics.pop(topic, None)
        self._delete_requests.discard(topic)
        for key in [k for k in self._states if k[0] == topic]:
            del self._states[key]
        self._notify("topic", topic)

    async def mark_shutdown_processed(self, broker_id: int, remaining: int) -> None:
        self.processed_shutdowns[broker_id] = remaining
        self._shutdown_requests[broker_id] = b'{"remaining": %d}' % remaining

    def topics(self) -> Mapping[str, TopicInfo]:
        return dict(self._topics)

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._states.get((topic, partition))

    def topic_states(self, topic: str, start: int, end: int) -> list[PartitionState | None]:
        return [self._states.get((topic, p)) for p in range(start, end)]

    async def update_isr(self, topic: str, partition: int, state: PartitionState, expected_version: int) -> PartitionState:
        current = self._states[(topic, partition)]
        if current.version != expected_version:
            raise BadVersionError()
        self.isr_writes.append((topic, partition, state.isr))
        return self.set_state(topic, partition, state.leader, state.leader_epoch, state.isr, state.controller_epoch)

    async def read_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._states.get((topic, partition))

    def add_listener(self, listener: Callable[[str, Any], None]) -> None:
        self._listeners.append(listener)

    def _notify(self, kind: str, key: Any) -> None:
        notify_listeners(self._listeners, kind, key)
