"""The controller of a cluster of one: the standalone broker is its own controller.

Its embedded store (``embedded.py``) already names it the leader of every partition at
epoch 0 with ISR = {itself}, so there is nothing to elect and nowhere to move a replica:
this controller answers the admin requests a ``Controller`` answers in a ZooKeeper
cluster, with what Kafka would answer for a cluster of one broker, through the same
checks (``decide_election``, ``reassignment_target``). The broker runs the same code
either way; only the controller object differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pykfk.cluster.controller import (
    ElectionOutcome,
    TopicPartition,
    decide_election,
    election_outcome,
    reassignment_target,
)
from pykfk.cluster.metadata import PartitionAssignment, TopicStore
from pykfk.errors import KafkaError


class LocalController:
    """``ClusterController`` of a standalone broker: always the active controller."""

    active = True
    leader_elections = 0
    unclean_leader_elections = 0
    # A deletion removes the topic's logs before it returns: a log of an unknown topic
    # means the metadata file was lost, so its data is kept (and not served).
    deletes_stray_logs = False

    def __init__(self, broker_id: int, store: TopicStore):
        self.broker_id = broker_id
        self.store = store

    def start(self) -> None:
        """The store made this broker the leader of every partition: nothing to elect."""

    async def stop(self) -> None:
        pass

    def post(self, kind: str, key: Any = None) -> None:
        """No events: the store applies every change before its call returns."""

    def internal_topic_replication_factor(self, topic: str, configured: int) -> int:
        """One replica, on the only broker there is."""
        return min(configured, 1)

    async def elect_leaders(self, election_type: int, partitions: Sequence[TopicPartition] | None,
                            timeout_s: float) -> dict[TopicPartition, ElectionOutcome]:
        """Every partition is led by its only replica already: ELECTION_NOT_NEEDED
        (preferred or unclean), or Kafka's code for a partition that does not exist."""
        me, store = self.broker_id, self.store
        keys = partitions if partitions is not None else [
            (t, p) for t, info in store.topics().items() for p in range(info.partitions)]
        return {(t, p): election_outcome(decide_election(store, election_type, t, p, {me}, {me}, 0, me)[0], t, p)
                for t, p in keys}

    async def alter_reassignments(self, targets: Mapping[TopicPartition, Sequence[int] | None],
                                  allow_replication_factor_change: bool,
                                  timeout_s: float) -> dict[TopicPartition, KafkaError | None]:
        """The only valid target is [this broker], where every partition already is;
        anything else names a broker that does not exist."""
        me = self.broker_id
        results: dict[TopicPartition, KafkaError | None] = {}
        for (topic, partition), target in targets.items():
            try:
                reassignment_target(self.store, topic, partition, target, {me}, allow_replication_factor_change, me)
                results[(topic, partition)] = None
            except KafkaError as exc:
                results[(topic, partition)] = exc
        return results

    async def list_reassignments(self, partitions: Sequence[TopicPartition] | None,
                                 timeout_s: float) -> dict[TopicPartition, PartitionAssignment]:
        """Nothing ever moves."""
        return {}
