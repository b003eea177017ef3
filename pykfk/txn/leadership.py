"""The transaction coordinator follows ``__transaction_state`` leadership, as the group
coordinator follows ``__consumer_offsets`` (``pykfk.group.leadership``): a partition is
loaded when this broker becomes its leader, at the partition's leader epoch as the
coordinator epoch, and unloaded when it stops leading it. Storage is a
``ReplicatedOffsetsLog`` over the topic: state writes return once the ISR has them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pykfk.group.leadership import ReplicatedOffsetsLog
from pykfk.txn.coordinator import TransactionCoordinator
from pykfk.txn.records import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from pykfk.cluster.replica import ReplicaManager

log = logging.getLogger("pykfk.txn")


class TransactionLeadership:
    """Loads and unloads the coordinator's partitions as the replica manager reports
    leadership changes. Loop-affine."""

    def __init__(self, coordinator: TransactionCoordinator, replicas: ReplicaManager, write_timeout_ms: int):
        self.coordinator = coordinator
        self.replicas = replicas
        self.write_timeout_ms = write_timeout_ms
        self._lock = asyncio.Lock()
        self._moves: set[asyncio.Task[None]] = set()
        replicas.leadership_listeners.append(self.on_leadership)

    def on_leadership(self, topic: str, partition: int, leader: bool) -> None:
        if topic == TRANSACTION_STATE_TOPIC:
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
            current = self.replicas.partitions.get((TRANSACTION_STATE_TOPIC, partition))
            is_leader = current is not None and current.role == "leader"
            if is_leader != leader:
                return  # moved again meanwhile; the later event does the work
            try:
                if current is not None and leader:
                    storage = ReplicatedOffsetsLog(self.replicas, partition, self.write_timeout_ms,
                                                   self.replicas.clock.time_ms, topic=TRANSACTION_STATE_TOPIC)
                    await self.coordinator.load_partition(partition, storage, current.leader_epoch)
                else:
                    await self.coordinator.unload_partition(partition)
            except Exception:
                log.exception("transaction coordinator %s of %s-%d failed", "load" if leader else "unload",
                              TRANSACTION_STATE_TOPIC, partition)
