"""Transaction markers from the coordinator to partition leaders (Kafka's
``TransactionMarkerChannelManager`` and the WriteTxnMarkers path of ``ReplicaManager``),
and the other way, a partition leader asking a coordinator on another broker whether a
transactional write belongs to an open transaction (KIP-890's verification).

Partitions this broker leads get their marker in-process; the others get a
WriteTxnMarkers request over the inter-broker channel (``pykfk.cluster.channel``), one
per leader. A marker counts as written once the partition's in-sync replicas have it
(acks=all). A marker ending a transaction on a ``__consumer_offsets`` partition also
tells the group coordinator, which then makes the transaction's offsets visible or drops
them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any

from pykfk.cluster.channel import ChannelError, PeerChannels, peer_address
from pykfk.cluster.metadata import NO_LEADER
from pykfk.errors import ErrorCode, KafkaError
from pykfk.group.offsets import OFFSETS_TOPIC

if TYPE_CHECKING:
    from pykfk.cluster.replica import ReplicaManager
    from pykfk.group.coordinator import GroupCoordinator

log = logging.getLogger("pykfk.txn")

WRITE_TXN_MARKERS = 27
WRITE_TXN_MARKERS_VERSION = 1
ADD_PARTITIONS_TO_TXN = 24
ADD_PARTITIONS_TO_TXN_VERSION = 4
TopicPartition = tuple[str, int]


async def write_local_marker(replicas: ReplicaManager, groups: GroupCoordinator | None, topic: str,
                             partition: int, producer_id: int, producer_epoch: int, commit: bool,
                             coordinator_epoch: int, timeout_ms: int) -> int:
    """One marker on a partition this broker leads; the error code."""
    codes = await write_local_markers(replicas, groups, [(topic, partition)], producer_id, producer_epoch,
                                      commit, coordinator_epoch, timeout_ms)
    return codes[0]


async def write_local_markers(replicas: ReplicaManager, groups: GroupCoordinator | None,
                              partitions: list[TopicPartition], producer_id: int, producer_epoch: int,
                              commit: bool, coordinator_epoch: int, timeout_ms: int) -> list[int]:
    """Markers on partitions this broker leads, an error code for each. All are
    appended in one pass before any wait, so their replication (or flush) waits
    overlap; a partition whose marker is already covered by the high watermark costs no
    task or await."""
    codes: list[int] = [int(ErrorCode.NONE)] * len(partitions)
    waits: list[tuple[int, Coroutine[Any, Any, ErrorCode]]] = []
    for i, (topic, partition) in enumerate(partitions):
        try:
            leader = replicas.leader_partition(topic, partition)
            _info, wait = leader.append_marker(producer_id, producer_epoch, commit, coordinator_epoch, timeout_ms)
        except KafkaError as exc:
            codes[i] = int(exc.code)
            continue
        if wait is not None:
            waits.append((i, wait))
    if waits:
        results = await asyncio.gather(*(wait for _i, wait in waits), return_exceptions=True)
        for (i, _wait), result in zip(waits, results, strict=True):
            if isinstance(result, KafkaError):
                codes[i] = int(result.code)
            elif isinstance(result, BaseException):
                raise result
            else:
                codes[i] = int(result)
    if groups is not None:
        for i, (topic, partition) in enumerate(partitions):
            if codes[i] == ErrorCode.NONE and topic == OFFSETS_TOPIC:
                await groups.complete_transaction(producer_id, partition, commit)
    return codes


class BrokerMarkerWriter:
    """The coordinator's MarkerWriter on a broker: local partitions in-process, others
    by WriteTxnMarkers to their leader."""

    def __init__(self, broker: Any, timeout_ms: int):
        self.broker = broker
        self.timeout_ms = timeout_ms
        # A channel carries one request at a time; transactions ending together queue.
        self._channels = PeerChannels(f"pykfk-txn-markers-{broker.broker_id}", lambda b: peer_address(broker, b))

    async def write(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                    partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        replicas = self.broker.replica_manager
        me = self.broker.broker_id
        local: list[TopicPartition] = []
        remote: dict[int, list[TopicPartition]] = {}
        codes: dict[TopicPartition, int] = {}
        for topic, partition in partitions:
            state = self.broker.metadata.partition_state(topic, partition)
            if self.broker.metadata.get_topic(topic) is None:
                codes[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            elif state is None or state.leader == NO_LEADER:
                codes[(topic, partition)] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif state.leader == me:
                local.append((topic, partition))
            else:
                remote.setdefault(state.leader, []).append((topic, partition))
        groups = getattr(self.broker, "group_coordinator", None)
        local_markers = write_local_markers(replicas, groups, local, producer_id, producer_epoch, commit,
                                            coordinator_epoch, self.timeout_ms)
        if not remote:  # the common case on one broker: no gather, no task per leader
            codes.update(zip(local, await local_markers, strict=True))
            return codes
        local_codes, remote_codes = await asyncio.gather(
            local_markers,
            asyncio.gather(*(self._send(leader, producer_id, producer_epoch, commit, coordinator_epoch, targets)
                             for leader, targets in remote.items())))
        codes.update(zip(local, local_codes, strict=True))
        for answer in remote_codes:
            codes.update(answer)
        return codes

    async def _send(self, leader: int, producer_id: int, producer_epoch: int, commit: bool,
                    coordinator_epoch: int, targets: list[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in targets:
            by_topic.setdefault(topic, []).append(partition)
        body = {"markers": [{
            "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
            "coordinator_epoch": coordinator_epoch,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()],
        }]}
        failed = dict.fromkeys(targets, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
        try:
            response = await self._request(leader, WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body)
        except (ChannelError, KafkaError, OSError) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader, exc)
            return failed
        codes: dict[TopicPartition, int] = {}
        for marker in response.markers:
            for topic in marker.topics:
                for result in topic.partitions:
                    codes[(topic.name, result.partition_index)] = result.error_code
        return {**failed, **codes}

    async def verify(self, coordinator: int, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[TopicPartition], verify_only: bool = True) -> dict[TopicPartition, int]:
        """Asks the coordinator on broker ``coordinator`` (AddPartitionsToTxn v4 with
        verify_only, KIP-890) whether the partitions are in the producer's open
        transaction, or (``verify_only`` off, transaction version 2) to add them to it;
        NOT_COORDINATOR for each when it cannot be asked."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        body = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": verify_only, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}]}
        failed = dict.fromkeys(partitions, int(ErrorCode.NOT_COORDINATOR))
        try:
            response = await self._request(coordinator, ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_TO_TXN_VERSION, body)
        except (ChannelError, KafkaError, OSError) as exc:
            log.info("verifying a transaction with broker %d failed: %s", coordinator, exc)
            return failed
        codes = {(topic.name, result.partition_index): result.partition_error_code
                 for txn in response.results_by_transaction for topic in txn.topic_results
                 for result in topic.results_by_partition}
        return {**failed, **codes}

    async def _request(self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any]) -> Any:
        """One request on the channel to ``broker_id`` (one at a time per channel)."""
        return await self._channels.request(broker_id, api_key, api_version, body, timeout_s=self.timeout_ms / 1000 + 5)

    def close(self) -> None:
        self._channels.close()
