"""The transaction coordinator follows ``__transaction_state`` leadership, as the group
coordinator follows ``__consumer_offsets`` (``pykfk.group.leadership``): a partition is
loaded when this broker becomes its leader, at the partition's leader epoch as the
coordinator epoch, and unloaded when it stops leading it. Storage is a
``ReplicatedOffsetsLog`` over the topic: state writes return once the ISR has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pykfk.group.leadership import InternalTopicLeadership, ReplicatedOffsetsLog
from pykfk.txn.coordinator import TransactionCoordinator
from pykfk.txn.records import TRANSACTION_STATE_TOPIC

if TYPE_CHECKING:
    from pykfk.cluster.replica import ReplicaManager


class TransactionLeadership(InternalTopicLeadership):
    """The transaction coordinator follows ``__transaction_state`` leadership; the
    partition's leader epoch is the coordinator epoch."""

    topic = TRANSACTION_STATE_TOPIC
    coordinator_name = "transaction coordinator"

    def __init__(self, coordinator: TransactionCoordinator, replicas: ReplicaManager, write_timeout_ms: int):
        self.coordinator = coordinator
        super().__init__(replicas, write_timeout_ms)

    async def load(self, partition: int, storage: ReplicatedOffsetsLog, leader_epoch: int) -> None:
        await self.coordinator.load_partition(partition, storage, leader_epoch)

    async def unload(self, partition: int) -> None:
        await self.coordinator.unload_partition(partition)
