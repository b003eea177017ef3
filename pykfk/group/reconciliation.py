"""The consumer group protocol's state (KIP-848) and its epoch-based reconciliation.

A group has a *group epoch*, bumped whenever something that changes the assignment
changes (a member joins, leaves or changes its subscription; a subscribed topic appears,
grows or goes). The coordinator then computes a *target assignment* and stamps it with the
group epoch: the *assignment epoch*. Each member moves towards its target on its own,
heartbeat by heartbeat (Kafka's ``CurrentAssignmentBuilder``):

1. It first gives up what it must lose: those partitions leave its assignment and wait in
   *partitions pending revocation* until a heartbeat shows the member no longer owns
   them. Its *member epoch* stays where it was meanwhile (state UNREVOKED_PARTITIONS).
2. Then it gets its new partitions and the assignment epoch as its member epoch; a
   partition still held by another member (assigned or pending revocation there) is
   held back until that member released it (state UNRELEASED_PARTITIONS).
3. Once it holds its whole target it is STABLE.

Partitions that stay with a member never leave its assignment, so it keeps consuming
them through every rebalance. This module holds the state and these rules, and nothing
of time, storage or the wire (``consumer_group.py`` drives it).
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Iterable, Mapping

from pykfk.group.assignors import Assignment


class MemberState(enum.IntEnum):
    """Kafka's MemberState byte, stored in ConsumerGroupCurrentMemberAssignment."""

    STABLE = 1
    UNREVOKED_PARTITIONS = 2
    UNRELEASED_PARTITIONS = 3
    UNKNOWN = 127


class GroupState(enum.Enum):
    """Kafka's ConsumerGroupState names (ListGroups, ConsumerGroupDescribe)."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclasses.dataclass
class ConsumerMember:
    """One member as the coordinator keeps it (and stores it in its three records)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = dataclasses.field(default_factory=dict)
    pending_revocation: Assignment = dataclasses.field(default_factory=dict)

    def owned(self) -> Iterable[tuple[uuid.UUID, int]]:
        """Partitions this member may still be consuming: assigned or being revoked."""
        for source in (self.assigned, self.pending_revocation):
            for topic_id, partitions in source.items():
                for partition in partitions:
                    yield topic_id, partition


@dataclasses.dataclass
class ConsumerGroup:
    """A consumer-protocol group: epochs, members, target assignment, and the metadata
    of the topics its members subscribe to (name -> (topic id, partition count))."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = dataclasses.field(default_factory=dict)
    target: dict[str, Assignment] = dataclasses.field(default_factory=dict)
    subscribed_topics: dict[str, tuple[uuid.UUID, int]] = dataclasses.field(default_factory=dict)
    # Owner epoch of every partition some member holds (assigned or pending revocation).
    partition_epochs: dict[tuple[uuid.UUID, int], int] = dataclasses.field(default_factory=dict)
    # The topics each subscribed regular expression matched when last resolved, and the
    # topic catalog version then (-1: to resolve again). Resolved after the heartbeat that
    # brought it; until then it contributes no topic (Kafka's order).
    resolved_regexes: dict[str, frozenset[str]] = dataclasses.field(default_factory=dict)
    regexes_resolved_at: int = -1

    def regexes(self) -> set[str]:
        """The regular expressions its members subscribe with."""
        return {m.subscribed_topic_regex for m in self.members.values() if m.subscribed_topic_regex}

    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch or m.state != MemberState.STABLE
               for m in self.members.values()):
            return GroupState.RECONCILING
        return GroupState.STABLE

    def release(self, member: ConsumerMember) -> None:
        """Forget which partitions ``member`` holds (before changing or removing it)."""
        for key in member.owned():
            self.partition_epochs.pop(key, None)

    def claim(self, member: ConsumerMember) -> None:
        """Record which partitions ``member`` holds (after changing it)."""
        for key in member.owned():
            self.partition_epochs[key] = member.member_epoch

    def rebuild_partition_epochs(self) -> None:
        self.partition_epochs.clear()
        for member in self.members.values():
            self.claim(member)


OwnedPartitions = Mapping[uuid.UUID, frozenset[int]] | None


def _still_owns_any(revoking: Assignment, owned: OwnedPartitions) -> bool:
    """Whether the member may still hold any of ``revoking``: an unknown owned set (the
    heartbeat did not say) counts as yes."""
    if owned is None:
        return any(revoking.values())
    return any(partitions & owned.get(topic_id, frozenset()) for topic_id, partitions in revoking.items())


def reconcile(group: ConsumerGroup, member: ConsumerMember, owned: OwnedPartitions) -> ConsumerMember:
    """The member's next step towards its target (a new object; the input is unchanged).
    ``owned`` is what the member's heartbeat says it owns (None: not said)."""
    target_epoch = group.assignment_epoch
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _still_owns_any(member.pending_revocation, owned):
            return member
        return _next_assignment(group, member, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS or member.member_epoch != target_epoch:
        return _next_assignment(group, member, owned)
    return member


def _next_assignment(group: ConsumerGroup, member: ConsumerMember, owned: OwnedPartitions) -> ConsumerMember:
    target = group.target.get(member.member_id, {})
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    gain: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    mine = set(member.owned())
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        if current & wanted:
            keep[topic_id] = current & wanted
        if current - wanted:
            revoke[topic_id] = current - wanted
        free = frozenset(p for p in wanted - current
                         if (topic_id, p) not in group.partition_epochs or (topic_id, p) in mine)
        unreleased = unreleased or len(free) < len(wanted - current)
        if free:
            gain[topic_id] = free
    if revoke and _still_owns_any(revoke, owned):
        # Step 1: revoke first; the epoch moves only once the member let go.
        return dataclasses.replace(member, state=MemberState.UNREVOKED_PARTITIONS, assigned=keep,
                                   pending_revocation=revoke)
    assigned = {t: keep.get(t, frozenset()) | gain.get(t, frozenset()) for t in set(keep) | set(gain)}
    return dataclasses.replace(
        member, state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        previous_member_epoch=member.member_epoch, member_epoch=group.assignment_epoch,
        assigned=assigned, pending_revocation={})


def update_member(group: ConsumerGroup, updated: ConsumerMember) -> None:
    """Put ``updated`` in place of the member of the same id, keeping the partition
    ownership map right."""
    old = group.members.get(updated.member_id)
    if old is not None:
        group.release(old)
    group.members[updated.member_id] = updated
    group.claim(updated)


def remove_member(group: ConsumerGroup, member_id: str) -> ConsumerMember | None:
    member = group.members.pop(member_id, None)
    if member is not None:
        group.release(member)
        group.target.pop(member_id, None)
    return member
