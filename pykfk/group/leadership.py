"""The group coordinator follows ``__consumer_offsets`` leadership: a partition is
loaded when this broker becomes its leader and unloaded when it stops being it (Kafka's
``GroupCoordinator.onElection`` / ``onResignation``). A standalone broker leads every
partition, so it loads them all; in a cluster they move with leadership.

Storage for a loaded partition is a ``ReplicatedOffsetsLog``: appends go through the
replica manager with acks=all, so a commit is acknowledged once the ISR has it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pykfk.errors import ErrorCode, KafkaError
from pykfk.group.coordinator import GroupCoordinator
from pykfk.group.offsets import OFFSETS_TOPIC
from pykfk.group.storage import LogOffsetsLog, OffsetsEntry

if TYPE_CHECKING:
    from pykfk.cluster.replica import ReplicaManager

log = logging.getLogger("pykfk.group")


class ReplicatedOffsetsLog:
    """The coordinator's storage for one ``__consumer_offsets`` partition this broker
    leads: appends return once the ISR has them (acks=all). ``topic``: another internal
    topic kept the same way (the transaction coordinator's ``__transaction_state``)."""

    def __init__(self, replicas: ReplicaManager, partition: int, commit_timeout_ms: int, clock_ms: Any,
                 topic: str = OFFSETS_TOPIC):
        self.replicas = replicas
        self.partition = partition
        self.commit_timeout_ms = commit_timeout_ms
        self.topic = topic
        self._clock_ms = clock_ms
        self._reader = LogOffsetsLog(replicas.partitions[(topic, partition)].log)

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        from pykfk._core.records import build_batch

        now_ms = self._clock_ms()
        batch = bytearray(build_batch([(k, v, now_ms, ()) for k, v in records]))
        try:
            await self.replicas.append(self.topic, self.partition, batch, -1, self.commit_timeout_ms)
        except KafkaError as exc:
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KafkaError(ErrorCode.NOT_COORDINATOR, str(exc)) from None
            raise

    async def append_transactional(self, records: list[tuple[bytes, bytes | None]], producer_id: int,
                                   producer_epoch: int) -> None:
        """TxnOffsetCommit's records, acks=all like every other write here."""
        from pykfk.group.storage import transactional_batch

        batch = transactional_batch(records, producer_id, producer_epoch, self._clock_ms())
        try:
            await self.replicas.append(self.topic, self.partition, batch, -1, self.commit_timeout_ms)
        except KafkaError as exc:
            if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
                raise KafkaError(ErrorCode.NOT_COORDINATOR, str(exc)) from None
            raise

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        return self._reader.read_all()

    def read_entries(self) -> Iterator[OffsetsEntry]:
        return self._reader.read_entries()


class InternalTopicLeadership:
    """Loads and unloads a coordinator's partitions of an internal ``topic`` as the
    replica manager reports leadership changes (``leadership_listeners``), one change at
    a time. Subclasses say what loading and unloading a partition means. Loop-affine."""

    topic = OFFSETS_TOPIC
    coordinator_name = "group coordinator"

    def __init__(self, replicas: ReplicaManager, write_timeout_ms: int):
        self.replicas = replicas
        self.write_timeout_ms = write_timeout_ms
        self._lock = asyncio.Lock()
        self._moves: set[asyncio.Task[None]] = set()
        replicas.leadership_listeners.append(self.on_leadership)

    def on_leadership(self, topic: str, partition: int, leader: bool) -> None:
        if topic == self.topic:
            task = asyncio.get_running_loop().create_task(self._move(partition, leader))
            self._moves.add(task)
            task.add_done_callback(self._moves.discard)

    async def settled(self) -> None:
        """Wait until the leadership changes seen so far are loaded or unloaded."""
        if self._moves:
            await asyncio.gather(*list(self._moves), return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._moves):
            task.cancel()
        await self.settled()

    async def _move(self, partition: int, leader: bool) -> None:
        async with self._lock:
            current = self.replicas.partitions.get((self.topic, partition))
            is_leader = current is not None and current.role == "leader"
            if is_leader != leader:
                return  # moved again meanwhile; the later event does the work
            try:
                if current is not None and leader:
                    storage = ReplicatedOffsetsLog(self.replicas, partition, self.write_timeout_ms,
                                                   self.replicas.clock.time_ms, topic=self.topic)
                    await self.load(partition, storage, current.leader_epoch)
                else:
                    await self.unload(partition)
            except Exception:
                log.exception("%s %s of %s-%d failed", self.coordinator_name, "load" if leader else "unload",
                              self.topic, partition)

    async def load(self, partition: int, storage: ReplicatedOffsetsLog, leader_epoch: int) -> None:
        raise NotImplementedError

    async def unload(self, partition: int) -> None:
        raise NotImplementedError


class CoordinatorLeadership(InternalTopicLeadership):
    """The group coordinator follows ``__consumer_offsets`` leadership."""

    def __init__(self, coordinator: GroupCoordinator, replicas: ReplicaManager, commit_timeout_ms: int):
        self.coordinator = coordinator
        super().__init__(replicas, commit_timeout_ms)

    async def load(self, partition: int, storage: ReplicatedOffsetsLog, leader_epoch: int) -> None:
        await self.coordinator.load_partition(partition, storage)

    async def unload(self, partition: int) -> None:
        await self.coordinator.unload_partition(partition)
