"""What the share-group handlers (ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
ShareAcknowledge) share: the broker's ``ShareCoordinator``, acknowledgements applied to
a share partition, and one share partition's read (records acquired with the whole
batches that hold them)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pykfk._core.errors import CorruptBatchError
from pykfk._core.records import parse_batch_header
from pykfk.cluster.metadata import GROUP_ENTITIES, TopicExistsError
from pykfk.cluster.replica import Partition
from pykfk.config import ConfigKey, choice_parser
from pykfk.errors import ErrorCode, KafkaError
from pykfk.group.share.coordinator import (
    GROUP_CONFIG_DEFAULTS,
    GROUP_CONFIG_VALUES,
    LOCK_DURATION,
    ShareCoordinator,
    coordinator_of,
)
from pykfk.group.share.partition import AckBatch, Acquired, SharePartition
from pykfk.group.share.state_records import (
    SHARE_STATE_TOPIC,
    SHARE_STATE_TOPIC_CONFIG,
    ShareSnapshot,
)
from pykfk.log.log import Log
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed
from pykfk.server.handlers.metadata import topic_ids
from pykfk.server.share_state import NO_LEADER_EPOCH, persister_of

log = logging.getLogger("pykfk.group")

def share_coordinator(ctx: RequestContext) -> ShareCoordinator:
    """The broker's share groups and share partitions (made on first use)."""
    found = coordinator_of(ctx.broker, ctx.broker.config)
    assert found is not None
    return found


async def coordinator_for_offsets_change(ctx: RequestContext, group_id: str, operation: Operation
                                         ) -> tuple[ShareCoordinator | None, int, str | None]:
    """The share coordinator for a change of ``group_id``'s stored offsets (Alter/Delete
    ShareGroupOffsets), or why not: (None, error code, message). The group must be
    ``operation``-allowed, coordinated here and without members, as Kafka checks."""
    if not group_allowed(ctx, operation, group_id):
        return None, ErrorCode.GROUP_AUTHORIZATION_FAILED, None
    if not ctx.broker.group_coordinator.owns(group_id):
        return None, ErrorCode.NOT_COORDINATOR, None
    coordinator = share_coordinator(ctx)
    group = coordinator.groups.get(group_id)
    if group is not None and group.members:
        return None, ErrorCode.NON_EMPTY_GROUP, f"The share group {group_id} has members."
    await load_group_configs(ctx)
    return coordinator, ErrorCode.NONE, None


def now_ms(ctx: RequestContext) -> int:
    return int(ctx.broker.replica_manager.clock.monotonic() * 1000)


class WireAckBatch(Protocol):
    first_offset: int
    last_offset: int
    acknowledge_types: Sequence[int]


def acknowledge(part: SharePartition | None, member_id: str, batches: Iterable[WireAckBatch]) -> int:
    """A partition's acknowledgement batches applied (all or none); the error code."""
    wanted = [AckBatch(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in batches]
    if not wanted:
        return ErrorCode.NONE
    if part is None:  # nothing was ever acquired here
        return ErrorCode.INVALID_RECORD_STATE
    return part.acknowledge(member_id, wanted)


# Bytes one share partition's read takes from its log at most (at least one batch):
# what it answers is cut to the batches holding the records it acquires.
MAX_READ_BYTES = 1 << 20


@dataclass
class ShareRead:
    records: bytes
    acquired: list[Acquired]


def read_and_acquire(part: SharePartition, plog: Log, member_id: str, max_bytes: int, max_records: int,
                     now: int, read_committed: bool) -> ShareRead:
    """Acquire for ``member_id`` what one read of the log returns: from the lowest
    available offset (a redelivery, else the share-partition end), whole batches up to
    ``max_bytes`` (at least one) below the high watermark (the last stable offset under
    read_committed). Control batches, and aborted transactional ones under
    read_committed, are archived, never handed out."""
    limit = plog.last_stable_offset if read_committed else plog.high_watermark
    part.expire_locks(now)
    start = _first_to_deliver(part, limit)
    if start is None:
        return ShareRead(b"", [])
    region = plog.read(start, min(max_bytes, MAX_READ_BYTES), max_offset=limit).file_region
    if region is None or region.size <= 0:
        return ShareRead(b"", [])
    data = region.read()
    end, size, skipped = _scan(data, plog, start, limit, read_committed, max_records)
    if end <= start:
        return ShareRead(b"", [])
    acquired = part.acquire(member_id, end, max_records, now, skipped)
    return ShareRead(data[:size] if acquired else b"", acquired)


def _first_to_deliver(part: SharePartition, limit: int) -> int | None:
    for item in part.ranges:
        if item.state == 0 and item.first < limit:  # AVAILABLE
            return item.first
    end = part.end_offset
    if end < limit and part.in_flight < part.settings.max_in_flight:
        return end
    return None


def _scan(data: bytes, plog: Log, start: int, limit: int, read_committed: bool, max_records: int
          ) -> tuple[int, int, list[tuple[int, int]]]:
    """(offset after the last whole batch, its byte size, offset ranges never to deliver)
    of batches read from ``start``, up to the batch that reaches ``max_records`` offsets
    (the answer carries only batches that can hold acquired records): control batches,
    and under read_committed the batches of aborted transactions (the consumers' rule: a
    producer's aborted transaction starts at its first offset and ends at its next
    control batch)."""
    aborted = sorted(((t.first_offset, t.producer_id) for t in plog.aborted_transactions(start, limit)),
                     reverse=True) if read_committed else []
    in_aborted: set[int] = set()
    skipped: list[tuple[int, int]] = []
    position, end = 0, start
    while position + 61 <= len(data):
        try:
            header = parse_batch_header(data, position)
        except CorruptBatchError:  # a torn tail: stop at the last whole batch
            break
        if position + header.size > len(data) or header.base_offset >= limit:
            break
        while aborted and aborted[-1][0] <= header.base_offset:
            in_aborted.add(aborted.pop()[1])
        if header.is_control:
            in_aborted.discard(header.producer_id)
            skipped.append((header.base_offset, header.last_offset))
        elif header.is_transactional and header.producer_id in in_aborted:
            skipped.append((header.base_offset, header.last_offset))
        position += header.size
        end = header.last_offset + 1
        if end - start >= max_records:
            break
    return end, position, skipped


def _lock_duration(raw: object) -> int:
    text = str(raw).strip()
    if not text.isdigit() or int(text) <= 0:
        raise ValueError("expected a positive number of milliseconds")
    return int(text)


# The group configs of share groups (GROUP resources, KIP-932), their parsers and defaults
# (the lock duration's default is the broker's setting: ``group_config_defaults``).
GROUP_CONFIG_KEYS: Mapping[str, ConfigKey] = {
    **{name: ConfigKey(name, choice_parser(*sorted(GROUP_CONFIG_VALUES[name])), default, doc)
       for name, default, doc in (
           ("share.auto.offset.reset", GROUP_CONFIG_DEFAULTS["share.auto.offset.reset"],
            "where a share group starts on a partition it has no state for: latest or earliest"),
           ("share.isolation.level", GROUP_CONFIG_DEFAULTS["share.isolation.level"],
            "read_committed hands out committed records only"),
       )},
    LOCK_DURATION: ConfigKey(LOCK_DURATION, _lock_duration, None,
                             "how long a member holds the records it acquired (the broker's "
                             "group.share.record.lock.duration.ms when unset)", "int"),
}


def group_config_defaults(ctx: RequestContext) -> dict[str, str]:
    """What each group config is when a group does not set it."""
    defaults = {name: str(key.default) for name, key in GROUP_CONFIG_KEYS.items()}
    defaults[LOCK_DURATION] = str(ctx.broker.config["group.share.record.lock.duration.ms"])
    return defaults


async def alter_group_configs(ctx: RequestContext, group_id: str, configs: Mapping[str, str],
                              validate_only: bool) -> None:
    """New settings of a group (what IncrementalAlterConfigs or AlterConfigs made of the
    current ones): INVALID_CONFIG for a bad value, nothing stored then; kept in the
    cluster metadata (GROUP entities, as Kafka keeps group configs), so every broker
    leading a partition the group reads has them."""
    for name, value in configs.items():
        try:
            GROUP_CONFIG_KEYS[name].parse(value)
        except ValueError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, f"Invalid value {value} for configuration {name}: {exc}") from None
    if LOCK_DURATION in configs:
        low = ctx.broker.config["group.share.min.record.lock.duration.ms"]
        high = ctx.broker.config["group.share.max.record.lock.duration.ms"]
        if not low <= int(configs[LOCK_DURATION]) <= high:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             f"{LOCK_DURATION} must be greater than or equal to group.share.min.record.lock.duration.ms"
                             f" ({low}) and less than or equal to group.share.max.record.lock.duration.ms ({high})")
    if validate_only:
        return
    await ctx.broker.metadata.alter_entity_configs(GROUP_ENTITIES, group_id, dict(configs))
    await load_group_configs(ctx)


def group_configs(ctx: RequestContext, group_id: str) -> dict[str, str]:
    return dict(ctx.broker.metadata.entity_configs(GROUP_ENTITIES).get(group_id, {}))


def configured_groups(ctx: RequestContext) -> list[str]:
    """The groups with configs of their own."""
    return sorted(ctx.broker.metadata.entity_configs(GROUP_ENTITIES))


_STATE_TOPIC_READY: weakref.WeakSet[object] = weakref.WeakSet()
# The GROUP entity snapshot each broker's share coordinator was last given.
_CONFIGS_SEEN: weakref.WeakKeyDictionary[object, Mapping[str, Mapping[str, str]]] = weakref.WeakKeyDictionary()


async def load_group_configs(ctx: RequestContext) -> None:
    """The share groups' configs from the cluster metadata, given to this broker's share
    coordinator when they changed (a snapshot compared by identity: nothing to do
    otherwise); ``__share_group_state`` created on the way."""
    if ctx.broker not in _STATE_TOPIC_READY and await ensure_state_topic(ctx):
        _STATE_TOPIC_READY.add(ctx.broker)
    current = ctx.broker.metadata.entity_configs(GROUP_ENTITIES)
    if _CONFIGS_SEEN.get(ctx.broker) is current:
        return
    coordinator = share_coordinator(ctx)
    for group in set(current) | set(coordinator.group_configs):
        wanted = dict(current.get(group, {}))
        if coordinator.group_configs.get(group, {}) != wanted:
            coordinator.set_group_configs(group, wanted)
    _CONFIGS_SEEN[ctx.broker] = current


# -- durable state: __share_group_state ----------------------------------------------------


async def ensure_state_topic(ctx: RequestContext) -> bool:
    """Create ``__share_group_state`` on first use (compacted; Kafka's partition count
    and replication factor settings), and wait, bounded, for its leaders. False when it
    cannot be had (the share state then lives in memory only)."""
    store = ctx.broker.metadata
    if store.get_topic(SHARE_STATE_TOPIC) is None:
        config = ctx.broker.config
        factor = min(config["share.coordinator.state.topic.replication.factor"], len(store.live_broker_ids()))
        with contextlib.suppress(TopicExistsError):
            await store.create_topic(SHARE_STATE_TOPIC, config["share.coordinator.state.topic.num.partitions"],
                                     max(factor, 1), SHARE_STATE_TOPIC_CONFIG)
        for _ in range(100):  # up to 5 s for the partitions to get their leader (here: to lead)
            info = store.get_topic(SHARE_STATE_TOPIC)
            if info is not None and all(_leads_or_elsewhere(ctx, p) for p in range(info.partitions)):
                break
            await asyncio.sleep(0.05)
    return store.get_topic(SHARE_STATE_TOPIC) is not None


def _leads_or_elsewhere(ctx: RequestContext, number: int) -> bool:
    """A state partition has a leader, and leads already when that is this broker."""
    state = ctx.broker.metadata.partition_state(SHARE_STATE_TOPIC, number)
    if state is None:
        return False
    try:
        return state.leader != ctx.broker.broker_id or bool(
            ctx.broker.replica_manager.leader_partition(SHARE_STATE_TOPIC, number))
    except KafkaError:
        return False


def held_state(ctx: RequestContext, coordinator: ShareCoordinator, group_id: str, topic: str, partition: int
               ) -> tuple[SharePartition | None, int]:
    """The group's state of a partition for an acknowledgement: (state or None, error
    code). NOT_LEADER_OR_FOLLOWER off the leader; None when not loaded in this
    leadership (what the member holds was acquired from an earlier leader)."""
    try:
        leader = ctx.broker.replica_manager.leader_partition(topic, partition)
    except KafkaError as exc:
        return None, exc.code
    return coordinator.loaded(group_id, topic, partition, leader.leader_epoch), ErrorCode.NONE


async def load_partition(ctx: RequestContext, coordinator: ShareCoordinator, group_id: str, topic: str,
                         topic_id: uuid.UUID, partition: int, leader: Partition, recheck: bool = False
                         ) -> SharePartition | None:
    """The group's state of a partition this broker leads, loaded from its share
    coordinator when this leadership has not loaded it yet (a new state is stored at
    once, so a failover does not move its start). ``recheck`` (a new share session) asks
    the coordinator again: a state an AlterShareGroupOffsets or DeleteShareGroupOffsets
    replaced while the group had no members is loaded anew. None while the coordinator
    cannot answer: nothing is handed out then (no state is better than a wrong one)."""
    part = coordinator.loaded(group_id, topic, partition, leader.leader_epoch)
    if part is not None and not recheck:
        return part
    epoch = leader.leader_epoch
    code, stored = await persister_of(ctx.broker).read((group_id, topic_id, partition), epoch)
    if code != ErrorCode.NONE:
        log.info("share state of %s %s-%d not read: error %d", group_id, topic, partition, code)
        return part
    if part is not None:
        if part is not coordinator.loaded(group_id, topic, partition, leader.leader_epoch):
            return coordinator.loaded(group_id, topic, partition, leader.leader_epoch)  # replaced meanwhile
        if stored is not None and stored.state_epoch <= part.state_epoch:
            return part
        coordinator.drop(part)
    if leader.leader_epoch != epoch or coordinator.loaded(group_id, topic, partition, epoch) is not None:
        return coordinator.loaded(group_id, topic, partition, leader.leader_epoch)  # loaded meanwhile
    plog = leader.log
    part = coordinator.load(group_id, topic, partition, epoch,
                            None if stored is None else (stored.start_offset, stored.state_epoch, stored.batches),
                            plog.log_start_offset, plog.log_end_offset)
    if stored is None and await persist(ctx, group_id, topic_id, partition, part) != ErrorCode.NONE:
        coordinator.drop(part)
        return None
    return part


async def persist(ctx: RequestContext, group_id: str, topic_id: uuid.UUID, partition: int,
                  part: SharePartition) -> int:
    """Store the share partition's state at its share coordinator before the
    acknowledgement is answered; the error code. A state the coordinator fences (a
    newer leader or an AlterShareGroupOffsets wrote after it) is dropped here and loaded
    again by the next fetch."""
    snapshot = ShareSnapshot(part.state_epoch, part.start_offset, part.state_batches(), part.leader_epoch)
    code = await persister_of(ctx.broker).write((group_id, topic_id, partition), snapshot)
    if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
        share_coordinator(ctx).drop(part)
    return code


def listed(ctx: RequestContext, states_filter: Sequence[str], types_filter: Sequence[str]
           ) -> list[typed.ListGroupsResponseListedGroup]:
    """ListGroups entries of the share groups this broker coordinates."""
    states = {s.lower() for s in states_filter}
    types = {t.lower() for t in types_filter}
    if types and "share" not in types:
        return []
    return [{"group_id": group.group_id, "protocol_type": "share", "group_state": group.state, "group_type": "share"}
            for group in share_coordinator(ctx).groups.values()
            if (not states or group.state.lower() in states) and ctx.broker.group_coordinator.owns(group.group_id)]


async def forget(ctx: RequestContext, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
    """Drop a share partition's stored state (a tombstone at its share coordinator);
    the error code."""
    return await persister_of(ctx.broker).write((group_id, topic_id, partition), None)


async def store_start(ctx: RequestContext, group_id: str, topic_id: uuid.UUID, partition: int, offset: int) -> int:
    """A new start offset of a group without members (AlterShareGroupOffsets): a new
    state epoch, nothing in flight; the leader's state of the partition is then stale."""
    snapshot = ShareSnapshot(1, offset, [], NO_LEADER_EPOCH)
    return await persister_of(ctx.broker).write((group_id, topic_id, partition), snapshot)


async def start_offset(ctx: RequestContext, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[int, int]:
    """(error code, the share-partition start offset of a group: -1 where it has no state)."""
    code, stored = await persister_of(ctx.broker).read((group_id, topic_id, partition), NO_LEADER_EPOCH)
    return code, stored.start_offset if stored is not None else -1


def is_share_group(ctx: RequestContext, group_id: str) -> bool:
    return group_id in share_coordinator(ctx).groups


async def delete_group(ctx: RequestContext, group_id: str) -> int:
    """DeleteGroups of a share group: NON_EMPTY_GROUP while it has members; else the
    group, its sessions, its configs and its state of every partition go (tombstones in
    ``__share_group_state``)."""
    coordinator = share_coordinator(ctx)
    group = coordinator.groups.get(group_id)
    if group is not None and group.members:
        return ErrorCode.NON_EMPTY_GROUP
    coordinator.groups.pop(group_id, None)
    for session_key in [k for k in coordinator.sessions if k[0] == group_id]:
        del coordinator.sessions[session_key]
    ids = topic_ids(ctx.broker.metadata)
    for _group, topic, partition in [k for k in coordinator.partitions if k[0] == group_id]:
        del coordinator.partitions[(group_id, topic, partition)]
        code = await forget(ctx, group_id, ids.id_of(topic), partition)
        if code != ErrorCode.NONE:
            return code
    if group_configs(ctx, group_id):
        try:
            await ctx.broker.metadata.alter_entity_configs(GROUP_ENTITIES, group_id, {})
        except KafkaError as exc:
            return exc.code
        coordinator.set_group_configs(group_id, {})
    return ErrorCode.NONE
