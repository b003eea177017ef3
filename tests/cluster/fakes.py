"""An in-memory metadata store for unit tests of cluster logic (no I/O to fake away but
ZooKeeper's): topics with replica assignments, partition states with znode-like
versions and conditional updates, live brokers, the controller znodes."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kazoo.exceptions import BadVersionError

from pykfk.cluster.metadata import BrokerInfo, PartitionState, TopicInfo


class FakeStore:
    """The store methods the replica manager and the controller call, in memory."""

    single_broker = False

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

    # -- test controls -----------------------------------------------------------------

    def add_topic(self, name: str, assignment: Mapping[int, Sequence[int]], configs: Mapping[str, str] | None = None) -> None:
        replicas = {p: tuple(r) for p, r in assignment.items()}
        self._topics[name] = TopicInfo(name, len(replicas), len(next(iter(replicas.values()))),
                                       dict(configs or {}), name, replicas)

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
        return -1

    def topics(self) -> Mapping[str, TopicInfo]:
        return dict(self._topics)

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        return self._states.get((topic, partition))

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
        for listener in list(self._listeners):
            listener(kind, key)
