"""One consumer group of the classic group protocol: members, generation, state machine.

Mirrors apache/kafka's ``GroupMetadata`` / ``MemberMetadata`` (the classic, pre-KIP-848
protocol). This module holds state and the rules that need nothing but that state; the
timers, futures and storage around it live in ``coordinator.py``.

States and the transitions Kafka allows::

    Empty --------------> PreparingRebalance <----------------+
      ^                     |        ^                        |
      | (no member left)    v        | (join/leave/expiry)    |
      +-------------- CompletingRebalance ---> Stable --------+
    any state --> Dead  (group deleted, expired, or its partition unloaded)

CompletingRebalance is Kafka 2.0+'s name for AwaitingSync.
"""

from __future__ import annotations

import asyncio
import enum
import struct
from collections import Counter
from typing import Any

from pykfk.clock import TimerHandle
from pykfk.errors import ErrorCode
from pykfk.group.offsets import GroupMetadataRecord, MemberRecord, OffsetAndMetadata


def _subscription_topics(data: bytes) -> list[str] | None:
    """The topic names of a ConsumerProtocolSubscription (any version: the fields after
    the topics are not needed), or None when it is malformed."""
    try:
        (count,) = struct.unpack_from(">i", data, 2)
        pos, names = 6, []
        for _ in range(count):
            (length,) = struct.unpack_from(">h", data, pos)
            if length < 0 or pos + 2 + length > len(data):
                return None
            names.append(data[pos + 2:pos + 2 + length].decode())
            pos += 2 + length
        return names
    except (struct.error, UnicodeDecodeError):
        return None


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS = {
    GroupState.EMPTY: {GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {
        GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY,
    },
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE},
    GroupState.DEAD: set(GroupState),
}


class IllegalStateTransition(RuntimeError):
    """A transition Kafka's group state machine forbids: a coordinator bug, never input."""


class Member:
    """A member of a group. ``join_future``/``sync_future`` are set while the member has a
    JoinGroup/SyncGroup parked at the coordinator."""

    __slots__ = (
        "assignment",
        "client_host",
        "client_id",
        "group_instance_id",
        "heartbeat_timer",
        "is_leaving",
        "is_new",
        "join_future",
        "last_heartbeat",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync_future",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = b""
        self.join_future: asyncio.Future[Any] | None = None
        self.sync_future: asyncio.Future[Any] | None = None
        self.is_new = False
        self.is_leaving = False
        self.last_heartbeat = 0.0  # loop.time() of the last sign of life
        self.heartbeat_timer: TimerHandle | None = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_future is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        """Same protocols, same order, same metadata: rejoining changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member supports none of the candidate protocols")


class Group:
    """State of one group. Members keep join order (the first one is leader)."""

    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY, now_ms: int = -1):
        self.group_id = group_id
        self.state = state
        self.state_timestamp = now_ms  # wall-clock ms of the last transition (-1 unknown)
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group_instance_id -> member_id
        # member_id -> pending-member expiry timer (JoinGroup v4+ MEMBER_ID_REQUIRED)
        self.pending_members: dict[str, TimerHandle | None] = {}
        self.offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
        # Offsets whose commit is being written (count per key): not expired, and deleted
        # with the group, so a reload cannot resurrect them.
        self.pending_commits: Counter[tuple[str, int]] = Counter()
        self._protocol_counts: Counter[str] = Counter()
        # Rebalance bookkeeping (coordinator.py): the timer that completes the join phase,
        # whether it is Kafka's InitialDelayedJoin, and whether a member arrived during it.
        self.join_timer: TimerHandle | None = None
        self.initial_join: bool = False
        self.new_member_added = False
        # Members of this generation that have not sent SyncGroup yet, and the timer that
        # expels them after the rebalance timeout (Kafka's DelayedSync).
        self.pending_sync: set[str] = set()
        self.sync_timer: TimerHandle | None = None

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
            f"members={list(self.members)})"
        )

    # -- state ---------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {state.value} is not allowed"
            )
        self.state = state
        self.state_timestamp = now_ms

    def can_rebalance(self) -> bool:
        return self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY)

    # -- membership ------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self._protocol_counts.update(member.protocol_names())
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._protocol_counts.subtract(member.protocol_names())
        self._protocol_counts += Counter()  # drop zero counts
        if (member.group_instance_id is not None
                and self.static_members.get(member.group_instance_id) == member_id):
            del self.static_members[member.group_instance_id]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_sync.discard(member_id)
        return member

    def update_protocols(self, member: Member, protocols: list[tuple[str, bytes]]) -> None:
        self._protocol_counts.subtract(member.protocol_names())
        member.protocols = protocols
        self._protocol_counts.update(member.protocol_names())
        self._protocol_counts += Counter()

    def replace_static_member(self, group_instance_id: str, new_member_id: str) -> Member:
        """Give the static member behind ``group_instance_id`` a new member id (it keeps
        its assignment and its place; the leader id follows it)."""
        old_member_id = self.static_members[group_instance_id]
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        self.members[new_member_id] = member
        self.static_members[group_instance_id] = new_member_id
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return member

    def is_static_member_fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """A request naming an instance id that now belongs to another member id."""
        if group_instance_id is None:
            return False
        current = self.static_members.get(group_instance_id)
        return current is not None and current != member_id

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateCurrentMember: an instance id must exist and map to this member
        id (FENCED_INSTANCE_ID when another id holds it), and the member id must exist.

        A request with an instance id but no member id comes from a static member that
        dropped its id (librdkafka does when its session timed out while the coordinator
        was away): no other member replaced it, so it gets UNKNOWN_MEMBER_ID and takes its
        place back with a JoinGroup; FENCED_INSTANCE_ID would end the consumer for good."""
        if group_instance_id is not None:
            current = self.static_members.get(group_instance_id)
            if current is None or not member_id:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def has_all_members_joined(self) -> bool:
        return (
            all(m.is_awaiting_join for m in self.members.values())
            and not self.pending_members
        )

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members of a consumer group subscribe to, read from the subscription
        each member sent in its JoinGroup (ConsumerProtocolSubscription: version, topics,
        ...). None when the group is not a consumer group or a subscription is unreadable,
        so a caller cannot tell which topics are in use."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            names = _subscription_topics(member.metadata(self.protocol_name))
            if names is None:
                return None
            topics.update(names)
        return topics

    def elect_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick a member that did. False when no
        member has rejoined."""
        leader = self.members.get(self.leader_id or "")
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocol selection ------------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Kafka's rule: an empty group takes any non-empty type and protocol list;
        otherwise the type must match and at least one protocol must be supported by every
        current member."""
        if self.is_(GroupState.EMPTY) or not self.members:
            return bool(protocol_type) and bool(protocol_names)
        return protocol_type == self.protocol_type and any(
            self._protocol_counts[name] == len(self.members) for name in protocol_names
        )

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._protocol_counts.items() if count == n}

    def select_protocol(self) -> str:
        """Vote among the protocols all members support: each member votes for its most
        preferred candidate; most votes wins, ties go to the earliest in the leader's (or
        first member's) preference order."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id!r}: no protocol supported by all members")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        first = self.members.get(self.leader_id or "") or next(iter(self.members.values()))
        order = {name: i for i, name in enumerate(first.protocol_names())}
        return min(votes, key=lambda name: (-votes[name], order.get(name, len(order))))

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY, now_ms)

    # -- persistence ---------------------------------------------------------------------

    def to_record(self, assignments: dict[str, bytes] | None = None) -> GroupMetadataRecord:
        """The group metadata value for this generation; ``assignments`` overrides the
        members' current assignments (the leader's SyncGroup before it is applied)."""
        members = tuple(
            MemberRecord(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name),
                assignment=(assignments or {}).get(m.member_id, m.assignment),
            )
            for m in self.members.values()
        )
        return GroupMetadataRecord(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=self.state_timestamp,
            members=members,
        )

    @classmethod
    def from_record(cls, group_id: str, record: GroupMetadataRecord) -> Group:
        """A group as loaded from its last metadata record: Stable with its members, or
        Empty (Kafka's GroupMetadata.loadGroup)."""
        state = GroupState.STABLE if record.members else GroupState.EMPTY
        group = cls(group_id, state, record.current_state_timestamp)
        group.generation_id = record.generation
        group.protocol_type = record.protocol_type or None
        group.protocol_name = record.protocol
        for m in record.members:
            member = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host,
                m.rebalance_timeout, m.session_timeout, record.protocol_type,
                [(record.protocol or "", m.subscription)],
            )
            member.assignment = m.assignment
            group.add(member)
        group.leader_id = record.leader if record.leader in group.members else group.leader_id
        return group
