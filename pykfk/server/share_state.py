"""Durable share-partition state (KIP-932): the share coordinator and the way to it.

A share partition's state is kept by its share coordinator: the leader of the
``__share_group_state`` partition the share partition hashes to. ``ShareStateStore`` is
that role on this broker: it reads the state partitions it leads once per leader epoch
(a coordinator that moved here starts from the replicated log) and appends each new
snapshot (acks=all) before answering. Writes from a share-partition leader of an older
leader epoch, or of an older state epoch, are fenced (FENCED_LEADER_EPOCH,
FENCED_STATE_EPOCH): a leader that lost its partition cannot overwrite the new leader's
state.

``ShareStatePersister`` is what a share-partition leader (ShareFetch, ShareAcknowledge)
and the group coordinator (the offsets APIs, DeleteGroups) use: the local store when this
broker is the coordinator, else ReadShareGroupState (84), WriteShareGroupState (85) and
DeleteShareGroupState (86) to the coordinator over the inter-broker channel.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from pykfk._core.records import build_batch
from pykfk.cluster.channel import ChannelError, PeerChannels, peer_address
from pykfk.errors import ErrorCode, KafkaError
from pykfk.group.share.state_records import (
    SHARE_STATE_TOPIC,
    ShareSnapshot,
    decode_snapshot,
    decode_snapshot_key,
    snapshot_key,
    snapshot_value,
    state_partition,
)
from pykfk.group.storage import LogOffsetsLog

log = logging.getLogger("pykfk.group")

READ_SHARE_GROUP_STATE = 84
WRITE_SHARE_GROUP_STATE = 85
DELETE_SHARE_GROUP_STATE = 86
STATE_API_VERSION = 0
# A write of an administrator (AlterShareGroupOffsets), not of a share-partition leader:
# it starts a new state epoch instead of being fenced by one.
NO_LEADER_EPOCH = -1

ShareKey = tuple[str, uuid.UUID, int]  # group, topic id, partition


def _number(broker: Any, key: ShareKey) -> int | None:
    info = broker.metadata.get_topic(SHARE_STATE_TOPIC)
    return None if info is None else state_partition(key[0], key[1], key[2], info.partitions)


class ShareStateStore:
    """The share coordinator of the state partitions this broker leads."""

    def __init__(self, broker: Any):
        self.broker = broker
        # state partition -> (its leader epoch when read, the latest snapshot of each key)
        self._loaded: dict[int, tuple[int, dict[ShareKey, ShareSnapshot]]] = {}

    def _snapshots(self, number: int) -> dict[ShareKey, ShareSnapshot]:
        """The snapshots of a state partition led here (KafkaError NOT_COORDINATOR when
        not), read from its log when this leadership has not read them yet."""
        try:
            partition = self.broker.replica_manager.leader_partition(SHARE_STATE_TOPIC, number)
        except KafkaError as exc:
            raise KafkaError(ErrorCode.NOT_COORDINATOR, str(exc)) from None
        cached = self._loaded.get(number)
        if cached is not None and cached[0] == partition.leader_epoch:
            return cached[1]
        snapshots: dict[ShareKey, ShareSnapshot] = {}
        for key, value in LogOffsetsLog(partition.log).read_all():
            found = decode_snapshot_key(key)
            if found is None:
                continue
            snapshot = decode_snapshot(value) if value is not None else None
            if snapshot is None:
                snapshots.pop(found, None)
            else:
                snapshots[found] = snapshot
        self._loaded[number] = (partition.leader_epoch, snapshots)
        return snapshots

    def read(self, key: ShareKey, leader_epoch: int) -> tuple[int, ShareSnapshot | None]:
        """(error code, the stored snapshot or None). A share-partition leader's read
        with a newer leader epoch fences the older leader's later writes."""
        number = _number(self.broker, key)
        if number is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        try:
            snapshots = self._snapshots(number)
        except KafkaError as exc:
            return exc.code, None
        found = snapshots.get(key)
        if found is not None and leader_epoch != NO_LEADER_EPOCH:
            if leader_epoch < found.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, None
            snapshots[key] = dataclasses.replace(found, leader_epoch=leader_epoch)
        return ErrorCode.NONE, found

    async def write(self, key: ShareKey, snapshot: ShareSnapshot | None) -> int:
        """Append a snapshot (None: a tombstone) of ``key`` and keep it; the error code."""
        number = _number(self.broker, key)
        if number is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        try:
            snapshots = self._snapshots(number)
        except KafkaError as exc:
            return exc.code
        found = snapshots.get(key)
        if snapshot is not None and snapshot.leader_epoch == NO_LEADER_EPOCH:
            snapshot = dataclasses.replace(
                snapshot, state_epoch=max(snapshot.state_epoch, found.state_epoch + 1 if found is not None else 1),
                leader_epoch=found.leader_epoch if found is not None else NO_LEADER_EPOCH)
        elif snapshot is not None and found is not None:
            if snapshot.leader_epoch < found.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if snapshot.state_epoch < found.state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH
        value = snapshot_value(snapshot) if snapshot is not None else None
        batch = bytearray(build_batch([(snapshot_key(*key), value, self.broker.clock.time_ms(), ())]))
        try:
            await self.broker.replica_manager.append(SHARE_STATE_TOPIC, number, batch, -1, 30000)
        except KafkaError as exc:
            log.warning("share state of %s %s-%d not written: %s", key[0], key[1], key[2], exc)
            self._loaded.pop(number, None)  # the log may hold it or not: read it again
            return ErrorCode.NOT_COORDINATOR if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER else exc.code
        if snapshot is None:
            snapshots.pop(key, None)
        else:
            snapshots[key] = snapshot
        return ErrorCode.NONE


class _TopicData(Protocol):
    topic_id: uuid.UUID

    @property
    def partitions(self) -> Sequence[Any]: ...


async def each_partition(group_id: str, topics: Sequence[_TopicData], allowed: bool,
                         act: Callable[[ShareKey, Any], Awaitable[int]]) -> list[tuple[uuid.UUID, list[tuple[int, int]]]]:
    """What a state API (Initialize, Write, Delete) answers: per topic id, (partition,
    error code) of ``act`` on each partition of the request, CLUSTER_AUTHORIZATION_FAILED
    for all without ClusterAction."""
    out: list[tuple[uuid.UUID, list[tuple[int, int]]]] = []
    for topic in topics:
        rows: list[tuple[int, int]] = []
        for part in topic.partitions:
            code = (await act((group_id, topic.topic_id, part.partition), part) if allowed
                    else ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
            rows.append((part.partition, code))
        out.append((topic.topic_id, rows))
    return out


def _batches(snapshot: ShareSnapshot) -> list[dict[str, int]]:
    return [{"first_offset": f, "last_offset": last, "delivery_state": s, "delivery_count": c}
            for f, last, s, c in snapshot.batches]


class ShareStatePersister:
    """Reads and writes share-partition state at its share coordinator, here or on
    another broker."""

    def __init__(self, broker: Any):
        self.broker = broker
        self.store = ShareStateStore(broker)
        self._channels = PeerChannels(f"pykfk-share-state-{broker.broker_id}", lambda b: peer_address(broker, b))

    def _coordinator(self, key: ShareKey) -> int | None:
        number = _number(self.broker, key)
        state = self.broker.metadata.partition_state(SHARE_STATE_TOPIC, number) if number is not None else None
        return None if state is None or state.leader < 0 else int(state.leader)

    async def read(self, key: ShareKey, leader_epoch: int) -> tuple[int, ShareSnapshot | None]:
        coordinator = self._coordinator(key)
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        if coordinator == self.broker.broker_id:
            return self.store.read(key, leader_epoch)
        body = {"group_id": key[0], "topics": [{"topic_id": key[1], "partitions": [
            {"partition": key[2], "leader_epoch": leader_epoch}]}]}
        response = await self._request(coordinator, READ_SHARE_GROUP_STATE, body)
        if response is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, None
        for result in response.results:
            for part in result.partitions:
                if part.error_code != ErrorCode.NONE:
                    return part.error_code, None
                if part.start_offset < 0:
                    return ErrorCode.NONE, None
                return ErrorCode.NONE, ShareSnapshot(
                    part.state_epoch, part.start_offset,
                    [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in part.state_batches],
                    leader_epoch)
        return ErrorCode.UNKNOWN_SERVER_ERROR, None

    async def write(self, key: ShareKey, snapshot: ShareSnapshot | None) -> int:
        """Store a snapshot (None: drop the state); the error code."""
        coordinator = self._coordinator(key)
        if coordinator is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if coordinator == self.broker.broker_id:
            return await self.store.write(key, snapshot)
        if snapshot is None:
            api = DELETE_SHARE_GROUP_STATE
            body: dict[str, Any] = {"group_id": key[0], "topics": [{"topic_id": key[1], "partitions": [
                {"partition": key[2]}]}]}
        else:
            api = WRITE_SHARE_GROUP_STATE
            body = {"group_id": key[0], "topics": [{"topic_id": key[1], "partitions": [{
                "partition": key[2], "state_epoch": snapshot.state_epoch, "leader_epoch": snapshot.leader_epoch,
                "start_offset": snapshot.start_offset, "state_batches": _batches(snapshot)}]}]}
        response = await self._request(coordinator, api, body)
        if response is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        codes = [p.error_code for r in response.results for p in r.partitions]
        return codes[0] if codes else ErrorCode.UNKNOWN_SERVER_ERROR

    async def _request(self, broker_id: int, api_key: int, body: Mapping[str, Any]) -> Any:
        """One request to ``broker_id``; None when it cannot be had."""
        try:
            return await self._channels.request(broker_id, api_key, STATE_API_VERSION, dict(body), timeout_s=35)
        except (ChannelError, KafkaError, OSError) as exc:
            log.info("share state request %d to broker %d failed: %s", api_key, broker_id, exc)
            return None

    def close(self) -> None:
        self._channels.close()


_BY_BROKER: weakref.WeakKeyDictionary[object, ShareStatePersister] = weakref.WeakKeyDictionary()


def persister_of(broker: object) -> ShareStatePersister:
    """The broker's share-state persister (made on first use)."""
    found = _BY_BROKER.get(broker)
    if found is None:
        found = _BY_BROKER[broker] = ShareStatePersister(broker)
    return found


def close_persister(broker: object) -> None:
    """Close the broker's channels to share coordinators (a stopping broker)."""
    found = _BY_BROKER.pop(broker, None)
    if found is not None:
        found.close()
