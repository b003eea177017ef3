"""The consumer group protocol of KIP-848 (``group.protocol=consumer``) on the broker.

Members send ConsumerGroupHeartbeat; the coordinator answers each with the member's epoch
and, when it changed, the partitions it may consume now. Assignment is computed here by a
server-side assignor (``assignors.py``) and reached incrementally (``reconciliation.py``):
no stop-the-world rebalance, no JoinGroup/SyncGroup round.

``ConsumerGroups`` belongs to the classic ``GroupCoordinator`` and uses its partition
ownership checks, its ``__consumer_offsets`` writes and its clock. A group id is either a
classic group or a consumer group; committed offsets of both are kept by the classic
coordinator (a consumer group's offsets sit in an Empty classic entry that is never
listed). Loop affinity as in ``coordinator.py``: everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from pykfk.clock import TimerHandle
from pykfk.errors import ErrorCode
from pykfk.group import consumer_records as rec
from pykfk.group.assignors import ASSIGNORS, Assignment, MemberSpec, TopicSpec, assignor_name
from pykfk.group.group import Group as ClassicGroup
from pykfk.group.group import GroupState as ClassicState
from pykfk.group.offsets import OffsetsRecordError
from pykfk.group.reconciliation import (
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
    remove_member,
    update_member,
)
from pykfk.group.storage import OffsetsRecord, storage_error_code

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from pykfk.clock import Clock

log = logging.getLogger("pykfk.group")

E = ErrorCode
Result = dict[str, Any]
Record = OffsetsRecord

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
INT32_MAX = 2**31 - 1
PROTOCOL_TYPE = "consumer"


@dataclasses.dataclass(frozen=True)
class ConsumerGroupConfig:
    """Settings of consumer-protocol groups (Kafka's ``group.consumer.*`` names)."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    assignors: tuple[str, ...] = ("uniform", "range")
    max_size: int = INT32_MAX
    # pykfk: bound on one member's subscription (topic names plus regex, in bytes), the
    # classic group's group.member.metadata.max.bytes.
    subscription_max_bytes: int = 1 << 20

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> ConsumerGroupConfig:
        values: dict[str, Any] = {}
        for prop, field in (("group.consumer.session.timeout.ms", "session_timeout_ms"),
                            ("group.consumer.heartbeat.interval.ms", "heartbeat_interval_ms"),
                            ("group.consumer.max.size", "max_size"),
                            ("group.member.metadata.max.bytes", "subscription_max_bytes")):
            if props.get(prop) is not None:
                values[field] = int(props[prop])
        names = props.get("group.consumer.assignors")
        if names:
            items = names.split(",") if isinstance(names, str) else names
            values["assignors"] = tuple(assignor_name(str(n).strip()) for n in items if str(n).strip())
        return cls(**values)


class TopicCatalog(Protocol):
    """The cluster's topics as the coordinator needs them; ``version`` changes whenever a
    topic is created, deleted or grows (regex results are cached per version)."""

    @property
    def version(self) -> int: ...

    def topics(self) -> Mapping[str, tuple[uuid.UUID, int]]: ...


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str | None = None):
        super().__init__(message or code.name)
        self.code = code
        self.message = message


@dataclasses.dataclass
class Heartbeat:
    """A decoded ConsumerGroupHeartbeat request (fields null when unchanged)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: Sequence[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[uuid.UUID, frozenset[int]] | None = None
    client_id: str = ""
    client_host: str = ""
    # v1+: the member names itself; v0: the coordinator does.
    client_generates_id: bool = True
    # Whether the member may describe a topic (None: no authorizer); what its regular
    # expression may match.
    may_describe: Callable[[str], bool] | None = None


def _error_result(code: ErrorCode, message: str | None = None, member_id: str | None = None) -> Result:
    return {"error_code": code, "error_message": message, "member_id": member_id, "member_epoch": 0,
            "heartbeat_interval_ms": 0, "assignment": None}


def subscription_bytes(names: Sequence[str] | None, regex: str | None) -> int:
    return sum(len(n.encode()) for n in names or ()) + len((regex or "").encode())


def _is_internal(name: str) -> bool:
    return name.startswith("__")


class GroupOwner(Protocol):
    """What consumer groups use of the classic coordinator that owns them (``GroupCoordinator``):
    its group table, partition map, clock, task spawner and offsets log."""

    _groups: dict[str, ClassicGroup]
    _clock: Clock

    def _check_group(self, group_id: str | None, *, allow_empty_id: bool = False) -> ErrorCode | None: ...

    def group(self, group_id: str) -> ClassicGroup | None: ...

    def _now_ms(self) -> int: ...

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...

    async def _append(self, group_id: str, records: list[OffsetsRecord]) -> None: ...

    def partition_for(self, group_id: str) -> int: ...


class ConsumerGroups:
    """Every consumer-protocol group of one coordinator."""

    def __init__(self, owner: GroupOwner, config: ConsumerGroupConfig):
        self._owner = owner
        self.config = config
        self._groups: dict[str, ConsumerGroup] = {}
        self._loading: dict[int, dict[str, ConsumerGroup]] = {}
        self._session_timers: dict[tuple[str, str], TimerHandle] = {}
        self._revocation_timers: dict[tuple[str, str], TimerHandle] = {}
        self._regex_cache: dict[tuple[str, int], frozenset[str]] = {}
        # Groups whose regular expressions are being resolved, and who may see what: the
        # describe check of the member that last set each (group, regex).
        self._resolving: set[str] = set()
        self._describers: dict[tuple[str, str], Callable[[str], bool]] = {}

    # == lookups ================================================================================

    def get(self, group_id: str) -> ConsumerGroup | None:
        return self._groups.get(group_id)

    def has_members(self, group_id: str) -> bool:
        group = self._groups.get(group_id)
        return group is not None and bool(group.members)

    def groups(self) -> list[ConsumerGroup]:
        return list(self._groups.values())

    # == ConsumerGroupHeartbeat ====================================================================

    async def heartbeat(self, request: Heartbeat, catalog: TopicCatalog) -> Result:
        """One heartbeat: join (epoch 0), stay (the member's epoch), leave (-1, or -2 for a
        static member that will come back). Returns the response fields."""
        try:
            self._validate(request)
            error = self._owner._check_group(request.group_id)
            if error is not None:
                raise HeartbeatError(error)
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return await self._leave(request)
            group = self._group_for_join(request.group_id, request.member_epoch)
            member, records, joined = self._member_for(group, request)
        except HeartbeatError as exc:
            return _error_result(exc.code, exc.message, request.member_id or None)
        assigned_before = _nonempty(member.assigned)
        records += self._refresh(group, member, request, catalog, joined)
        updated = reconcile(group, group.members[member.member_id], request.owned)
        if updated != group.members[member.member_id] or joined:
            update_member(group, updated)
            records.append(self._current_assignment_record(group.group_id, updated))
        self._schedule(group, updated)
        error = await self._store(group.group_id, records)
        if error is not None:
            return _error_result(error, None, updated.member_id)
        assigned = _nonempty(updated.assigned)
        send = (request.member_epoch in (JOIN_EPOCH, member.previous_member_epoch) or assigned != assigned_before
                or request.owned is not None and _nonempty(request.owned) != assigned)
        return {"error_code": E.NONE, "error_message": None, "member_id": updated.member_id,
                "member_epoch": updated.member_epoch,
                "heartbeat_interval_ms": self.config.heartbeat_interval_ms,
                "assignment": {"topic_partitions": rec.topic_partitions(updated.assigned)} if send else None}

    def _validate(self, request: Heartbeat) -> None:
        """Kafka's checks of a heartbeat's fields (INVALID_REQUEST and friends)."""
        if not request.group_id:
            raise HeartbeatError(E.INVALID_REQUEST, "GroupId can't be empty.")
        if request.instance_id is not None and not request.instance_id:
            raise HeartbeatError(E.INVALID_REQUEST, "InstanceId can't be empty.")
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatError(E.INVALID_REQUEST, f"MemberEpoch {request.member_epoch} is invalid.")
        if not request.member_id and (request.member_epoch != JOIN_EPOCH or request.client_generates_id):
            raise HeartbeatError(E.INVALID_REQUEST, "MemberId can't be empty.")
        if request.member_epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms == -1:
                raise HeartbeatError(E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
            if request.owned:
                raise HeartbeatError(E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise HeartbeatError(E.INVALID_REQUEST,
                                     "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        size = subscription_bytes(request.subscribed_topic_names, request.subscribed_topic_regex)
        if size > self.config.subscription_max_bytes:
            raise HeartbeatError(E.INVALID_REQUEST, f"The subscription is {size} bytes, more than "
                                 f"{self.config.subscription_max_bytes} (group.member.metadata.max.bytes).")
        if request.server_assignor is not None and request.server_assignor not in self.config.assignors:
            raise HeartbeatError(E.UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {request.server_assignor} is not supported. "
                                 f"Supported assignors: {', '.join(self.config.assignors)}.")
        if request.subscribed_topic_regex:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as exc:
                raise HeartbeatError(E.INVALID_REGULAR_EXPRESSION,
                                     f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is invalid: {exc}")

    def _group_for_join(self, group_id: str, member_epoch: int) -> ConsumerGroup:
        group = self._groups.get(group_id)
        if group is not None:
            return group
        classic = self._owner.group(group_id)
        if classic is not None and (classic.members or not classic.is_(ClassicState.EMPTY)):
            # An empty classic group (offsets only) becomes a consumer group; one with
            # members stays classic (Kafka's migration of non-empty groups is not done).
            raise HeartbeatError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if member_epoch != JOIN_EPOCH:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Group {group_id} has no member with that id.")
        group = self._groups[group_id] = ConsumerGroup(group_id)
        self._ensure_offsets_holder(group_id)
        return group

    def _ensure_offsets_holder(self, group_id: str) -> None:
        """The Empty classic entry that keeps the group's committed offsets."""
        if self._owner.group(group_id) is None:
            self._owner._groups[group_id] = ClassicGroup(group_id, ClassicState.EMPTY, self._owner._now_ms())

    def _member_for(self, group: ConsumerGroup,
                    request: Heartbeat) -> tuple[ConsumerMember, list[Record], bool]:
        """The member the heartbeat speaks for, joined or checked against its epoch; and
        whether the group's membership changed (a group epoch bump)."""
        member = group.members.get(request.member_id) if request.member_id else None
        if request.member_epoch == JOIN_EPOCH:
            return self._join(group, request, member)
        if member is None:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of the group.")
        if request.instance_id is not None and member.instance_id != request.instance_id:
            raise HeartbeatError(E.FENCED_INSTANCE_ID, "InstanceId does not match the member's.")
        if request.member_epoch != member.member_epoch and not self._lost_bump(member, request):
            raise HeartbeatError(E.FENCED_MEMBER_EPOCH, f"The member epoch {request.member_epoch} is not "
                                 f"{member.member_epoch}.")
        return member, [], False

    @staticmethod
    def _lost_bump(member: ConsumerMember, request: Heartbeat) -> bool:
        """The member missed the response that moved its epoch: it may go on with the
        previous epoch while what it owns is inside its assignment (Kafka's rule)."""
        if request.member_epoch != member.previous_member_epoch or request.owned is None:
            return False
        return all(ps <= member.assigned.get(t, frozenset()) for t, ps in request.owned.items())

    def _join(self, group: ConsumerGroup, request: Heartbeat,
              existing: ConsumerMember | None) -> tuple[ConsumerMember, list[Record], bool]:
        records: list[Record] = []
        static = self._static_member(group, request.instance_id)
        if existing is None and static is None and len(group.members) >= self.config.max_size:
            raise HeartbeatError(E.GROUP_MAX_SIZE_REACHED, f"The group reached its maximum size "
                                 f"{self.config.max_size}.")
        member_id = request.member_id or str(uuid.uuid4())
        if static is not None and static.member_id != member_id:
            if static.member_epoch != STATIC_LEAVE_EPOCH:
                raise HeartbeatError(E.UNRELEASED_INSTANCE_ID, f"Static member {request.instance_id} with "
                                     "another member id has not left the group.")
            # A static member came back under a new id: it takes over the old one's
            # place, its epoch and assignment, without a rebalance (KIP-345, KIP-848).
            target = group.target.get(static.member_id, {})
            records += self._remove(group, static.member_id, bump=False)
            member = dataclasses.replace(static, member_id=member_id, member_epoch=static.previous_member_epoch)
            update_member(group, member)
            group.target[member_id] = target
            records.append(self._target_member_record(group.group_id, member_id, target))
        elif existing is not None:
            # Epoch 0 from a known member: it lost its state; it starts over.
            group.release(existing)
            member = dataclasses.replace(existing, member_epoch=0, previous_member_epoch=0,
                                         state=MemberState.STABLE, assigned={}, pending_revocation={})
            group.members[member_id] = member
        else:
            member = ConsumerMember(member_id)
            group.members[member_id] = member
            log.info("consumer group %r: member %r joins", group.group_id, member_id)
        member.client_id, member.client_host = request.client_id, request.client_host
        return member, records, static is None or existing is not None

    @staticmethod
    def _static_member(group: ConsumerGroup, instance_id: str | None) -> ConsumerMember | None:
        if instance_id is None:
            return None
        return next((m for m in group.members.values() if m.instance_id == instance_id), None)

    # == subscriptions, target assignment =============================================================

    def _refresh(self, group: ConsumerGroup, member: ConsumerMember, request: Heartbeat,
                 catalog: TopicCatalog, joined: bool) -> list[Record]:
        """Apply the heartbeat's changed fields; bump the group epoch when the
        subscriptions or the subscribed topics changed; compute a new target assignment
        when the group epoch moved past it."""
        records: list[Record] = []
        changed = self._apply_fields(member, request) or joined
        if changed or request.member_epoch == JOIN_EPOCH:
            records.append(self._member_metadata_record(group.group_id, member))
        if request.subscribed_topic_regex and request.may_describe is not None:
            self._describers[(group.group_id, request.subscribed_topic_regex)] = request.may_describe
        self._maybe_resolve(group, catalog)
        subscribed = self._subscribed_topics(group, catalog)
        if subscribed != group.subscribed_topics:
            group.subscribed_topics = subscribed
            records.append(self._partition_metadata_record(group))
            changed = True
        if changed:
            self._bump(group, records)
        if group.group_epoch > group.assignment_epoch:
            records += self._assign(group)
        return records

    @staticmethod
    def _apply_fields(member: ConsumerMember, request: Heartbeat) -> bool:
        """Copy what the heartbeat set; True when the subscription changed."""
        changed = False
        if request.subscribed_topic_names is not None:
            names = tuple(sorted(set(request.subscribed_topic_names)))
            changed = changed or names != member.subscribed_topic_names
            member.subscribed_topic_names = names
        if request.subscribed_topic_regex is not None:
            regex = request.subscribed_topic_regex or None
            changed = changed or regex != member.subscribed_topic_regex
            member.subscribed_topic_regex = regex
        if request.server_assignor is not None and request.server_assignor != member.server_assignor:
            member.server_assignor = request.server_assignor
            changed = True
        if request.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        return changed

    def _subscribed_topics(self, group: ConsumerGroup, catalog: TopicCatalog) -> dict[str, tuple[uuid.UUID, int]]:
        """The topics the group consumes: every member's named topics and what its
        regular expression matched when last resolved (nothing before that)."""
        topics = catalog.topics()
        names: set[str] = set()
        for member in group.members.values():
            names.update(member.subscribed_topic_names)
            if member.subscribed_topic_regex:
                names |= group.resolved_regexes.get(member.subscribed_topic_regex, frozenset())
        return {name: topics[name] for name in sorted(names) if name in topics}

    def _maybe_resolve(self, group: ConsumerGroup, catalog: TopicCatalog) -> None:
        """Resolve the group's regular expressions in a task of their own when one is new
        or the topics changed since: as in Kafka, a heartbeat is answered with the topics
        it names at once, and a regular expression's matches reach the members in a later
        group epoch (their next heartbeat)."""
        regexes = group.regexes()
        if not regexes:
            group.resolved_regexes.clear()
            return
        stale = group.regexes_resolved_at != catalog.version or not regexes <= group.resolved_regexes.keys()
        if stale and group.group_id not in self._resolving:
            self._resolving.add(group.group_id)
            self._owner._spawn(self._resolve(group.group_id, catalog))

    async def _resolve(self, group_id: str, catalog: TopicCatalog) -> None:
        try:
            await asyncio.sleep(0)  # the heartbeat that asked is answered first
            group = self._groups.get(group_id)
            if group is None:
                return
            regexes = group.regexes()
            for key in [k for k in self._describers if k[0] == group_id and k[1] not in regexes]:
                del self._describers[key]
            resolved = {regex: self._matching(regex, catalog, self._describers.get((group_id, regex)))
                        for regex in regexes}
            group.regexes_resolved_at = catalog.version
            subscribed = self._subscribed_topics(dataclasses.replace(group, resolved_regexes=resolved), catalog)
            if resolved == group.resolved_regexes and subscribed == group.subscribed_topics:
                return
            group.resolved_regexes = resolved
            records: list[Record] = []
            if subscribed != group.subscribed_topics:
                group.subscribed_topics = subscribed
                records.append(self._partition_metadata_record(group))
            self._bump(group, records)
            records += self._assign(group)
            log.info("consumer group %r: regular expressions resolved (%d topics) in group epoch %d",
                     group_id, sum(len(t) for t in resolved.values()), group.group_epoch)
            await self._store(group_id, records)
        finally:
            self._resolving.discard(group_id)

    def _matching(self, regex: str, catalog: TopicCatalog,
                  may_describe: Callable[[str], bool] | None = None) -> frozenset[str]:
        """Topic names the regex matches in full (as Kafka's RE2J ``matches``); internal
        topics never match, nor those ``may_describe`` refuses. Cached per catalog version."""
        key = (regex, catalog.version)
        found = self._regex_cache.get(key)
        if found is None:
            if len(self._regex_cache) > 1024:
                self._regex_cache.clear()
            pattern = re.compile(regex)
            found = self._regex_cache[key] = frozenset(
                n for n in catalog.topics() if not _is_internal(n) and pattern.fullmatch(n))
        if may_describe is not None:
            found = frozenset(n for n in found if may_describe(n))
        return found

    def _member_topics(self, group: ConsumerGroup, member: ConsumerMember) -> frozenset[uuid.UUID]:
        names = set(member.subscribed_topic_names)
        if member.subscribed_topic_regex:
            names |= group.resolved_regexes.get(member.subscribed_topic_regex, frozenset())
        return frozenset(group.subscribed_topics[n][0] for n in names if n in group.subscribed_topics)

    def _assignor_for(self, group: ConsumerGroup) -> str:
        """The assignor most members ask for, else the first configured (Kafka's rule)."""
        wanted = [m.server_assignor for m in group.members.values()
                  if m.server_assignor is not None and m.server_assignor in self.config.assignors]
        if wanted:
            return max(sorted(set(wanted)), key=wanted.count)
        return self.config.assignors[0] if self.config.assignors else "uniform"

    def _assign(self, group: ConsumerGroup) -> list[Record]:
        """A new target assignment for the group epoch; records of what changed."""
        name = self._assignor_for(group)
        specs = {m.member_id: MemberSpec(self._member_topics(group, m), group.target.get(m.member_id, {}))
                 for m in group.members.values()}
        topics = {tid: TopicSpec(n, count) for n, (tid, count) in group.subscribed_topics.items()}
        target = ASSIGNORS[name](specs, topics)
        records: list[Record] = []
        for member_id, assignment in target.items():
            if _nonempty(group.target.get(member_id, {})) != _nonempty(assignment) or member_id not in group.target:
                records.append(self._target_member_record(group.group_id, member_id, assignment))
        group.target = {m: _nonempty(a) for m, a in target.items()}
        group.assignment_epoch = group.group_epoch
        records.append((rec.encode_key(rec.TARGET_ASSIGNMENT_METADATA, group.group_id),
                        rec.encode_value(rec.TARGET_ASSIGNMENT_METADATA, {"assignment_epoch": group.assignment_epoch})))
        log.info("consumer group %r: target assignment of epoch %d by %s for %d members",
                 group.group_id, group.assignment_epoch, name, len(target))
        return records

    def _bump(self, group: ConsumerGroup, records: list[Record]) -> None:
        group.group_epoch += 1
        records.append((rec.encode_key(rec.GROUP_METADATA, group.group_id),
                        rec.encode_value(rec.GROUP_METADATA, {"epoch": group.group_epoch})))

    # == leaving, sessions =================================================================================

    async def _leave(self, request: Heartbeat) -> Result:
        group = self._groups.get(request.group_id)
        member = group.members.get(request.member_id) if group is not None else None
        if group is None or member is None:
            raise HeartbeatError(E.UNKNOWN_MEMBER_ID, f"Member {request.member_id} is not a member of the group.")
        if request.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
            # A static member going away for a while keeps its place and assignment until
            # its session runs out.
            update_member(group, dataclasses.replace(member, member_epoch=STATIC_LEAVE_EPOCH))
            self._start_session(group.group_id, member.member_id)
            records = [self._current_assignment_record(group.group_id, group.members[member.member_id])]
        else:
            log.info("consumer group %r: member %r leaves", group.group_id, member.member_id)
            records = self._remove(group, member.member_id, bump=True)
        error = await self._store(group.group_id, records)
        if error is not None:
            return _error_result(error, None, request.member_id)
        return {"error_code": E.NONE, "error_message": None, "member_id": request.member_id,
                "member_epoch": request.member_epoch, "heartbeat_interval_ms": 0, "assignment": None}

    def _remove(self, group: ConsumerGroup, member_id: str, *, bump: bool) -> list[Record]:
        """Take a member out (left, fenced, expired, replaced): tombstones of its records
        and, with ``bump``, a new group epoch so the others get its partitions."""
        self._cancel_timers(group.group_id, member_id)
        remove_member(group, member_id)
        records: list[Record] = [(rec.encode_key(kind, group.group_id, member_id), None)
                                 for kind in (rec.CURRENT_MEMBER_ASSIGNMENT, rec.TARGET_ASSIGNMENT_MEMBER,
                                              rec.MEMBER_METADATA)]
        if bump:
            self._bump(group, records)
        return records

    def _schedule(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        """Restart the member's session; while it owes a revocation, bound that by its
        rebalance timeout."""
        self._start_session(group.group_id, member.member_id)
        key = (group.group_id, member.member_id)
        if member.state != MemberState.UNREVOKED_PARTITIONS:
            timer = self._revocation_timers.pop(key, None)
            if timer is not None:
                timer.cancel()
        elif key not in self._revocation_timers:
            timeout_ms = member.rebalance_timeout_ms if member.rebalance_timeout_ms > 0 else self.config.session_timeout_ms
            self._revocation_timers[key] = self._owner._clock.call_later(
                timeout_ms / 1000, self._expire, group.group_id, member.member_id, "did not revoke in time")

    def _start_session(self, group_id: str, member_id: str) -> None:
        key = (group_id, member_id)
        timer = self._session_timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._session_timers[key] = self._owner._clock.call_later(
            self.config.session_timeout_ms / 1000, self._expire, group_id, member_id, "session timed out")

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        for timers in (self._session_timers, self._revocation_timers):
            timer = timers.pop((group_id, member_id), None)
            if timer is not None:
                timer.cancel()

    def _expire(self, group_id: str, member_id: str, why: str) -> None:
        """Fence a member that went quiet (or kept partitions too long): the others get
        its partitions at their next heartbeat."""
        self._cancel_timers(group_id, member_id)
        group = self._groups.get(group_id)
        if group is None or member_id not in group.members:
            return
        log.info("consumer group %r: member %r fenced: %s", group_id, member_id, why)
        records = self._remove(group, member_id, bump=True)
        self._owner._spawn(self._store(group_id, records))

    # == storage ======================================================================================

    async def _store(self, group_id: str, records: list[Record]) -> ErrorCode | None:
        if not records:
            return None
        try:
            await asyncio.shield(self._owner._spawn(self._owner._append(group_id, records)))
        except Exception as exc:  # noqa: BLE001 - every storage failure becomes an error code
            code = storage_error_code(exc, commit=False)
            log.warning("consumer group %r: storing records failed: %r -> %s", group_id, exc, code.name)
            return code
        return None

    @staticmethod
    def _member_metadata_record(group_id: str, member: ConsumerMember) -> Record:
        return (rec.encode_key(rec.MEMBER_METADATA, group_id, member.member_id), rec.encode_value(rec.MEMBER_METADATA, {
            "instance_id": member.instance_id, "rack_id": member.rack_id, "client_id": member.client_id,
            "client_host": member.client_host, "subscribed_topic_names": list(member.subscribed_topic_names),
            "subscribed_topic_regex": member.subscribed_topic_regex,
            "rebalance_timeout_ms": member.rebalance_timeout_ms, "server_assignor": member.server_assignor}))

    @staticmethod
    def _partition_metadata_record(group: ConsumerGroup) -> Record:
        topics = [{"topic_id": tid, "topic_name": name, "num_partitions": count, "partition_metadata": []}
                  for name, (tid, count) in group.subscribed_topics.items()]
        return (rec.encode_key(rec.PARTITION_METADATA, group.group_id),
                rec.encode_value(rec.PARTITION_METADATA, {"topics": topics}))

    @staticmethod
    def _target_member_record(group_id: str, member_id: str, assignment: Assignment) -> Record:
        return (rec.encode_key(rec.TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
                rec.encode_value(rec.TARGET_ASSIGNMENT_MEMBER, {"topic_partitions": rec.topic_partitions(assignment)}))

    @staticmethod
    def _current_assignment_record(group_id: str, member: ConsumerMember) -> Record:
        return (rec.encode_key(rec.CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id),
                rec.encode_value(rec.CURRENT_MEMBER_ASSIGNMENT, {
                    "member_epoch": member.member_epoch, "previous_member_epoch": member.previous_member_epoch,
                    "state": int(member.state), "assigned_partitions": rec.topic_partitions(member.assigned),
                    "partitions_pending_revocation": rec.topic_partitions(member.pending_revocation)}))

    def deletion_records(self, group_id: str) -> list[Record]:
        """Tombstones of every record of an empty consumer group (DeleteGroups)."""
        group = self._groups.pop(group_id, None)
        if group is None:
            return []
        return [(rec.encode_key(kind, group_id), None)
                for kind in (rec.TARGET_ASSIGNMENT_METADATA, rec.PARTITION_METADATA, rec.GROUP_METADATA)]

    # == loading ===========================================================================================

    def replay(self, partition: int, key: bytes, value: bytes | None) -> None:
        """One consumer group record read while loading ``partition``."""
        groups = self._loading.setdefault(partition, {})
        try:
            decoded = rec.decode_key(key)
            fields = None if value is None else rec.decode_value(decoded.record_type, value)
        except OffsetsRecordError as exc:
            log.warning("__consumer_offsets-%d: skipping unreadable consumer group record: %s", partition, exc)
            return
        group = groups.get(decoded.group_id)
        if group is None:
            if fields is None:
                return
            group = groups[decoded.group_id] = ConsumerGroup(decoded.group_id)
        _apply_record(group, decoded, fields)
        if decoded.record_type == rec.GROUP_METADATA and fields is None:
            del groups[decoded.group_id]

    def finish_load(self, partition: int, serve: bool) -> None:
        """Start serving the groups replayed from ``partition`` (``serve`` False: the load
        was abandoned). Every member gets a fresh session, as in Kafka."""
        loaded = self._loading.pop(partition, {})
        if not serve:
            return
        for group_id, group in loaded.items():
            group.members = {m: member for m, member in group.members.items() if member.client_id is not None}
            group.rebuild_partition_epochs()
            # What each regular expression matched is in the stored subscribed topics; it
            # is resolved again at the next heartbeat (and changes the epoch only if its
            # matches changed meanwhile).
            group.resolved_regexes = {regex: frozenset(n for n in group.subscribed_topics if re.fullmatch(regex, n))
                                      for regex in group.regexes()}
            self._groups[group_id] = group
            self._ensure_offsets_holder(group_id)
            for member_id in group.members:
                self._start_session(group_id, member_id)
        if loaded:
            log.info("loaded %d consumer groups from __consumer_offsets-%d", len(loaded), partition)

    def unload(self, partition: int) -> None:
        for group_id in [g for g in self._groups if self._owner.partition_for(g) == partition]:
            group = self._groups.pop(group_id)
            for member_id in group.members:
                self._cancel_timers(group_id, member_id)

    def shutdown(self) -> None:
        for timers in (self._session_timers, self._revocation_timers):
            for timer in timers.values():
                timer.cancel()
            timers.clear()

    # == describing =========================================================================================

    def describe(self, group_id: str, topic_names: Mapping[uuid.UUID, str]) -> Result:
        """ConsumerGroupDescribe's entry for one group."""
        error = self._owner._check_group(group_id)
        group = self._groups.get(group_id) if error is None else None
        if error is None and group is None:
            error = E.GROUP_ID_NOT_FOUND
        if error is not None or group is None:
            message = f"Group {group_id} not found." if error == E.GROUP_ID_NOT_FOUND else None
            return {"error_code": error, "error_message": message, "group_id": group_id, "group_state": "",
                    "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}

        def named(assignment: Assignment) -> dict[str, Any]:
            return {"topic_partitions": [{**tp, "topic_name": topic_names.get(tp["topic_id"], "")}
                                         for tp in rec.topic_partitions(assignment)]}

        return {"error_code": E.NONE, "error_message": None, "group_id": group_id,
                "group_state": group.state.value, "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch, "assignor_name": self._assignor_for(group),
                "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                             "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                             "subscribed_topic_names": list(m.subscribed_topic_names),
                             "subscribed_topic_regex": m.subscribed_topic_regex, "assignment": named(m.assigned),
                             "target_assignment": named(group.target.get(m.member_id, {})), "member_type": 1}
                            for m in group.members.values()]}

    # == offsets ==============================================================================================

    def commit_error(self, group_id: str, member_id: str, member_epoch: int, api_version: int) -> ErrorCode | None:
        """Whether an OffsetCommit may store offsets of a consumer group (Kafka's
        validateOffsetCommit): anyone while it has no members (epoch -1), else a member
        with its current epoch through OffsetCommit v9+."""
        group = self._groups.get(group_id)
        if group is None or (member_epoch < 0 and not group.members):
            return None
        member = group.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if api_version < 9:
            return E.UNSUPPORTED_VERSION
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return None


    def fetch_error(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode | None:
        """Whether an OffsetFetch may read a consumer group's offsets (Kafka's
        validateOffsetFetch): always without a member id and epoch (an admin client, or a
        client before v9); else only the member, at its current epoch."""
        group = self._groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return None
        member = group.members.get(member_id or "")
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member_epoch != member.member_epoch:
            return E.STALE_MEMBER_EPOCH
        return None


def _nonempty(assignment: Mapping[uuid.UUID, frozenset[int]]) -> dict[uuid.UUID, frozenset[int]]:
    return {t: ps for t, ps in assignment.items() if ps}


def _member(group: ConsumerGroup, member_id: str) -> ConsumerMember:
    member = group.members.get(member_id)
    if member is None:
        # client_id None marks a member seen only through assignment records so far.
        member = group.members[member_id] = ConsumerMember(member_id, client_id=None)  # type: ignore[arg-type]
    return member


def _apply_record(group: ConsumerGroup, key: rec.ConsumerGroupRecordKey, fields: Any) -> None:
    """Replay one record into ``group`` (last value wins; a tombstone deletes)."""
    kind = key.record_type
    if kind == rec.GROUP_METADATA:
        group.group_epoch = fields.epoch if fields is not None else group.group_epoch
    elif kind == rec.PARTITION_METADATA:
        group.subscribed_topics = {} if fields is None else {
            t.topic_name: (t.topic_id, t.num_partitions) for t in fields.topics}
    elif kind == rec.TARGET_ASSIGNMENT_METADATA:
        group.assignment_epoch = fields.assignment_epoch if fields is not None else 0
    elif kind == rec.TARGET_ASSIGNMENT_MEMBER:
        if fields is None:
            group.target.pop(key.member_id, None)
        else:
            group.target[key.member_id] = rec.assignment_of(fields.topic_partitions)
    elif fields is None:
        group.members.pop(key.member_id, None)
    elif kind == rec.MEMBER_METADATA:
        member = _member(group, key.member_id)
        member.instance_id, member.rack_id = fields.instance_id, fields.rack_id
        member.client_id, member.client_host = fields.client_id, fields.client_host
        member.subscribed_topic_names = tuple(fields.subscribed_topic_names)
        member.subscribed_topic_regex = fields.subscribed_topic_regex
        member.rebalance_timeout_ms, member.server_assignor = fields.rebalance_timeout_ms, fields.server_assignor
    elif kind == rec.CURRENT_MEMBER_ASSIGNMENT:
        member = _member(group, key.member_id)
        member.member_epoch, member.previous_member_epoch = fields.member_epoch, fields.previous_member_epoch
        member.state = MemberState(fields.state) if fields.state in MemberState._value2member_map_ else MemberState.UNKNOWN
        member.assigned = rec.assignment_of(fields.assigned_partitions)
        member.pending_revocation = rec.assignment_of(fields.partitions_pending_revocation)

