"""Share groups (KIP-932): members, epochs and server-side assignment, share sessions, and
the share-partition state of the partitions this broker leads.

Membership lives with the group's coordinator (ShareGroupHeartbeat); share-partition
state lives with the partition's leader (ShareFetch, ShareAcknowledge): one
``ShareCoordinator`` per broker holds both, each used where the requests arrive. Every
call takes ``now_ms``; nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pykfk.errors import ErrorCode
from pykfk.group.share.partition import SharePartition, SharePartitionSettings, initial_start_offset

# Group configs of share groups (IncrementalAlterConfigs on GROUP resources) and their
# defaults.
GROUP_CONFIG_DEFAULTS: Mapping[str, str] = {
    "share.auto.offset.reset": "latest",
    "share.isolation.level": "read_uncommitted",
}
GROUP_CONFIG_VALUES: Mapping[str, frozenset[str]] = {
    "share.auto.offset.reset": frozenset({"latest", "earliest"}),
    "share.isolation.level": frozenset({"read_uncommitted", "read_committed"}),
}

# A group's own acquisition lock duration (the broker's group.share.record.lock.duration.ms
# when unset), between group.share.min.record.lock.duration.ms and .max.record.lock.duration.ms.
LOCK_DURATION = "share.record.lock.duration.ms"

PartitionKey = tuple[str, str, int]  # group, topic, partition
# What a share partition's stored state gives: (start offset, state epoch, state batches).
StoredState = tuple[int, int, Sequence[tuple[int, int, int, int]]]


class ConfigLookup(Protocol):
    """A broker's settings by name (``pykfk.config.BrokerConfig``)."""

    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True)
class ShareSettings:
    session_timeout_ms: int = 45000
    heartbeat_interval_ms: int = 5000
    lock_duration_ms: int = 30000
    delivery_count_limit: int = 5
    max_in_flight: int = 2000
    max_size: int = 200
    max_groups: int = 10

    @property
    def max_sessions(self) -> int:
        """Share sessions a broker keeps at most (Kafka: members per group times groups)."""
        return self.max_size * self.max_groups

    @classmethod
    def from_config(cls, config: ConfigLookup) -> ShareSettings:
        def num(name: str) -> int:
            value = config[name]
            assert isinstance(value, int)
            return value

        lock = min(max(num("group.share.record.lock.duration.ms"), num("group.share.min.record.lock.duration.ms")),
                   num("group.share.max.record.lock.duration.ms"))
        return cls(num("group.share.session.timeout.ms"), num("group.share.heartbeat.interval.ms"), lock,
                   num("group.share.delivery.count.limit"), num("group.share.partition.max.record.locks"),
                   num("group.share.max.size"), num("group.share.max.groups"))

    @property
    def partition_settings(self) -> SharePartitionSettings:
        return SharePartitionSettings(self.lock_duration_ms, self.delivery_count_limit, self.max_in_flight)


@dataclass
class ShareMember:
    member_id: str
    epoch: int
    subscribed: tuple[str, ...]
    last_seen_ms: int
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    assignment: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


@dataclass(frozen=True)
class HeartbeatAnswer:
    error: int
    member_id: str | None = None
    epoch: int = 0
    assignment: dict[str, list[int]] | None = None
    message: str | None = None


@dataclass
class ShareSession:
    epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)


def simple_assignment(members: Mapping[str, Sequence[str]], partitions: Mapping[str, int]
                      ) -> dict[str, dict[str, list[int]]]:
    """Kafka's simple share assignor: per topic, its partitions spread over the members
    subscribed to it; with more members than partitions, every partition is shared by
    several members (member i gets partition i mod P), as records, not partitions, are
    what share-group members divide between them."""
    out: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    for topic, count in sorted(partitions.items()):
        subscribers = sorted(m for m, topics in members.items() if topic in topics)
        if not subscribers or count <= 0:
            continue
        if len(subscribers) >= count:
            for index, member in enumerate(subscribers):
                out[member][topic] = [index % count]
        else:
            for p in range(count):
                out[subscribers[p % len(subscribers)]].setdefault(topic, []).append(p)
    return out


class ShareCoordinator:
    def __init__(self, settings: ShareSettings):
        self.settings = settings
        self.groups: dict[str, ShareGroup] = {}
        self.partitions: dict[PartitionKey, SharePartition] = {}
        self.sessions: dict[tuple[str, str], ShareSession] = {}
        self.group_configs: dict[str, dict[str, str]] = {}

    # -- membership ----------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, subscribed: Sequence[str] | None,
                  partitions: Mapping[str, int], now_ms: int, rack_id: str | None = None,
                  client_id: str = "", client_host: str = "") -> HeartbeatAnswer:
        """One ShareGroupHeartbeat. ``partitions``: the partition count of every topic
        of the cluster (subscribed topics that do not exist get nothing)."""
        self.expire_members(now_ms)
        if not group_id:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, message="GroupId can't be empty.")
        if not member_id:
            return HeartbeatAnswer(ErrorCode.INVALID_REQUEST, message="MemberId can't be empty.")
        group = self.groups.get(group_id)
        if member_epoch == -1:
            if group is not None and member_id in group.members:
                self._remove(group, member_id)
            return HeartbeatAnswer(ErrorCode.NONE, member_id, -1)
        if member_epoch == 0:
            if not subscribed:
                return HeartbeatAnswer(ErrorCode.INVALID_REQUEST,
                                       message="SubscribedTopicNames must be set in first request.")
            if group is None and len(self.groups) >= self.settings.max_groups:
                return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                       message=f"The maximum number of share groups "
                                               f"({self.settings.max_groups}) has been reached.")
            group = self.groups.setdefault(group_id, ShareGroup(group_id))
            if member_id not in group.members and len(group.members) >= self.settings.max_size:
                return HeartbeatAnswer(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                       message=f"The share group has reached its maximum capacity of "
                                               f"{self.settings.max_size} members.")
            group.members[member_id] = ShareMember(member_id, 0, tuple(sorted(set(subscribed))), now_ms)
            group.epoch += 1
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatAnswer(ErrorCode.UNKNOWN_MEMBER_ID,
                                       message=f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != member.epoch:
                return HeartbeatAnswer(ErrorCode.FENCED_MEMBER_EPOCH,
                                       message=f"The share group member has a different epoch ({member.epoch}).")
            if subscribed is not None and tuple(sorted(set(subscribed))) != member.subscribed:
                member.subscribed = tuple(sorted(set(subscribed)))
                group.epoch += 1
        member = group.members[member_id]
        member.last_seen_ms = now_ms
        member.rack_id, member.client_id, member.client_host = rack_id, client_id, client_host
        self._assign(group, partitions)
        target = group.target.get(member_id, {})
        changed = member.epoch != group.assignment_epoch or member.assignment != target
        if changed:
            member.epoch, member.assignment = group.assignment_epoch, target
        return HeartbeatAnswer(ErrorCode.NONE, member_id, member.epoch,
                               dict(member.assignment) if changed or member_epoch == 0 else None)

    def _assign(self, group: ShareGroup, partitions: Mapping[str, int]) -> None:
        subscribed = {t for m in group.members.values() for t in m.subscribed}
        counts = {t: partitions[t] for t in subscribed if t in partitions}
        target = simple_assignment({m.member_id: m.subscribed for m in group.members.values()}, counts)
        if group.epoch != group.assignment_epoch or target != group.target:
            if target != group.target and group.epoch == group.assignment_epoch:
                group.epoch += 1  # topics came or grew
            group.target, group.assignment_epoch = target, group.epoch

    def expire_members(self, now_ms: int) -> list[tuple[str, str]]:
        """Fence the members not heard from within the session timeout."""
        gone: list[tuple[str, str]] = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                if now_ms - member.last_seen_ms > self.settings.session_timeout_ms:
                    self._remove(group, member.member_id)
                    gone.append((group.group_id, member.member_id))
        return gone

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        del group.members[member_id]
        group.epoch += 1
        self.sessions.pop((group.group_id, member_id), None)
        self.release_member(group.group_id, member_id)

    def release_member(self, group_id: str, member_id: str) -> None:
        for (group, _topic, _p), part in self.partitions.items():
            if group == group_id:
                part.release_member(member_id)

    # -- share sessions ------------------------------------------------------------------

    def session(self, group_id: str, member_id: str, epoch: int, adding: Iterable[tuple[str, int]] = (),
                forgetting: Iterable[tuple[str, int]] = (), acknowledge_only: bool = False
                ) -> ShareSession | int:
        """The share session of a ShareFetch (or, ``acknowledge_only``, a
        ShareAcknowledge) with ``epoch``, or the error code refusing it: epoch 0 opens a
        new session (not for an acknowledgement), -1 names the last request of one, any
        other must be the session's next epoch."""
        key = (group_id, member_id)
        found = self.sessions.get(key)
        if epoch == 0:
            if acknowledge_only:
                return ErrorCode.INVALID_SHARE_SESSION_EPOCH
            if found is None and len(self.sessions) >= self.settings.max_sessions:
                return ErrorCode.SHARE_SESSION_LIMIT_REACHED
            found = self.sessions[key] = ShareSession(1, set(adding))
            return found
        if found is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch == -1:
            del self.sessions[key]
            return found
        if epoch != found.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        found.partitions.update(adding)
        found.partitions.difference_update(forgetting)
        found.epoch = found.epoch + 1 if found.epoch < 2**31 - 1 else 1
        return found

    # -- share partitions ----------------------------------------------------------------

    def group_config(self, group_id: str, name: str) -> str:
        return self.group_configs.get(group_id, {}).get(name, GROUP_CONFIG_DEFAULTS[name])

    def lock_duration_ms(self, group_id: str) -> int:
        """The group's acquisition lock duration: its ``share.record.lock.duration.ms``,
        else the broker's ``group.share.record.lock.duration.ms``."""
        given = self.group_configs.get(group_id, {}).get(LOCK_DURATION)
        return int(given) if given is not None else self.settings.lock_duration_ms

    def partition_settings(self, group_id: str) -> SharePartitionSettings:
        return dataclasses.replace(self.settings.partition_settings, lock_duration_ms=self.lock_duration_ms(group_id))

    def set_group_configs(self, group_id: str, configs: Mapping[str, str]) -> None:
        """A group's new configs (none: the defaults); later acquisitions use them."""
        if configs:
            self.group_configs[group_id] = dict(configs)
        else:
            self.group_configs.pop(group_id, None)
        for (group, _topic, _p), part in self.partitions.items():
            if group == group_id:
                part.settings = self.partition_settings(group_id)

    def loaded(self, group_id: str, topic: str, partition: int, leader_epoch: int) -> SharePartition | None:
        """The group's state of a partition this broker leads at ``leader_epoch``; None
        when it was not loaded in this leadership (it is then loaded with ``load``)."""
        part = self.partitions.get((group_id, topic, partition))
        return part if part is not None and part.leader_epoch == leader_epoch else None

    def load(self, group_id: str, topic: str, partition: int, leader_epoch: int, stored: StoredState | None,
             log_start: int, log_end: int) -> SharePartition:
        """The group's state of a partition whose leadership (``leader_epoch``) just
        began here: what its share coordinator has stored (start offset, state epoch,
        state batches; what was acquired is available again), else a new state from
        where ``share.auto.offset.reset`` says."""
        if stored is not None:
            start, epoch, batches = stored
            part = SharePartition.restored(start, epoch, batches, self.partition_settings(group_id), leader_epoch)
        else:
            start = initial_start_offset(self.group_config(group_id, "share.auto.offset.reset"), log_start, log_end)
            part = SharePartition(start, self.partition_settings(group_id), 1, leader_epoch)
        self.partitions[(group_id, topic, partition)] = part
        return part

    def drop(self, part: SharePartition) -> None:
        """Forget a state found stale (its share coordinator fenced a write)."""
        for key in [k for k, v in self.partitions.items() if v is part]:
            del self.partitions[key]

    def lag(self, key: PartitionKey, high_watermark: int) -> int:
        """Records below the high watermark not yet acknowledged or archived."""
        part = self.partitions.get(key)
        if part is None:
            return 0
        settled = sum(r.last - r.first + 1 for r in part.ranges if r.state in (2, 4))  # ACKNOWLEDGED, ARCHIVED
        return max(high_watermark - part.start_offset - settled, 0)

    def next_lock_deadline_ms(self, keys: Iterable[PartitionKey]) -> int | None:
        deadlines = [d for k in keys if (p := self.partitions.get(k)) is not None
                     and (d := p.next_deadline_ms()) is not None]
        return min(deadlines) if deadlines else None

    def with_settings(self, settings: ShareSettings) -> None:
        """New broker settings (a dynamic config change): later acquisitions use them."""
        self.settings = settings
        for (group, _topic, _p), part in self.partitions.items():
            part.settings = self.partition_settings(group)


_BY_BROKER: weakref.WeakKeyDictionary[object, ShareCoordinator] = weakref.WeakKeyDictionary()


def coordinator_of(broker: object, config: ConfigLookup | None = None) -> ShareCoordinator | None:
    """The broker's share coordinator, made from ``config`` on first use (None when
    none was made and no ``config`` is given)."""
    found = _BY_BROKER.get(broker)
    if found is None and config is not None:
        found = _BY_BROKER[broker] = ShareCoordinator(ShareSettings.from_config(config))
    return found
