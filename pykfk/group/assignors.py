"""Server-side assignors of the consumer group protocol (KIP-848): ``uniform`` and ``range``.

An assignor maps the group's members and the partitions of the topics they subscribe to
onto a target assignment. It is a pure function of its input (no clock, no I/O), so the
coordinator can run it on every group epoch bump and tests can call it directly.

- ``uniform`` (Kafka's default): every member gets the same number of partitions, give or
  take one, across all its topics, and a partition stays with its previous owner whenever
  balance allows, so a rebalance moves as few partitions as it can.
- ``range``: per topic, the subscribed members in member-id order each get a contiguous
  range of partitions, the first ``partitions % members`` one more (members subscribed to
  co-partitioned topics get the same partition numbers of each).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping

# Partitions of each topic (by topic id) held by one member.
Assignment = dict[uuid.UUID, frozenset[int]]


@dataclasses.dataclass(frozen=True)
class TopicSpec:
    """A subscribed topic as the assignor sees it."""

    name: str
    partitions: int


@dataclasses.dataclass(frozen=True)
class MemberSpec:
    """What an assignor needs of a member: the ids of the topics it subscribes to (those
    that exist) and its current target, which the sticky assignor tries to keep."""

    topics: frozenset[uuid.UUID]
    previous: Assignment = dataclasses.field(default_factory=dict)


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, TopicSpec]], dict[str, Assignment]]


def _as_assignment(owned: Mapping[tuple[uuid.UUID, int], str], member_ids: list[str]) -> dict[str, Assignment]:
    grouped: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in member_ids}
    for (topic_id, partition), member_id in owned.items():
        grouped[member_id].setdefault(topic_id, set()).add(partition)
    return {m: {t: frozenset(ps) for t, ps in topics.items()} for m, topics in grouped.items()}


def uniform(members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, TopicSpec]) -> dict[str, Assignment]:
    """Balanced and sticky: keep, then fill the least loaded, then even out."""
    member_ids = sorted(members)
    eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
    for topic_id, spec in sorted(topics.items(), key=lambda item: item[1].name):
        subscribers = [m for m in member_ids if topic_id in members[m].topics]
        for partition in range(spec.partitions):
            if subscribers:
                eligible[(topic_id, partition)] = subscribers
    load = dict.fromkeys(member_ids, 0)
    owned = _keep_previous(members, eligible, load)
    _fill(eligible, owned, load)
    _even_out(eligible, owned, load)
    return _as_assignment(owned, member_ids)


def _keep_previous(members: Mapping[str, MemberSpec], eligible: Mapping[tuple[uuid.UUID, int], list[str]],
                   load: dict[str, int]) -> dict[tuple[uuid.UUID, int], str]:
    """Each member keeps what it had that still exists and it still subscribes to, up to
    its fair share (rounded up), so a new member finds partitions to take."""
    fair = -(-len(eligible) // max(len(members), 1))
    owned: dict[tuple[uuid.UUID, int], str] = {}
    for member_id in sorted(members):
        for topic_id, partitions in sorted(members[member_id].previous.items()):
            for partition in sorted(partitions):
                key = (topic_id, partition)
                if key in eligible and key not in owned and member_id in eligible[key] and load[member_id] < fair:
                    owned[key] = member_id
                    load[member_id] += 1
    return owned


def _fill(eligible: Mapping[tuple[uuid.UUID, int], list[str]], owned: dict[tuple[uuid.UUID, int], str],
          load: dict[str, int]) -> None:
    """Unowned partitions to the least loaded eligible member; partitions with the fewest
    candidates first, so a member subscribed to a rare topic is not crowded out."""
    unowned = sorted((key for key in eligible if key not in owned), key=lambda k: (len(eligible[k]), str(k[0]), k[1]))
    for key in unowned:
        member_id = min(eligible[key], key=lambda m: (load[m], m))
        owned[key] = member_id
        load[member_id] += 1


def _even_out(eligible: Mapping[tuple[uuid.UUID, int], list[str]], owned: dict[tuple[uuid.UUID, int], str],
              load: dict[str, int]) -> None:
    """Move single partitions from a member with two or more above another eligible
    member's count, until no such move exists (bounded by the partition count squared)."""
    for _ in range(len(eligible) * max(len(load), 1) + 1):
        move = _best_move(eligible, owned, load)
        if move is None:
            return
        key, to_member = move
        load[owned[key]] -= 1
        load[to_member] += 1
        owned[key] = to_member


def _best_move(eligible: Mapping[tuple[uuid.UUID, int], list[str]], owned: Mapping[tuple[uuid.UUID, int], str],
               load: Mapping[str, int]) -> tuple[tuple[uuid.UUID, int], str] | None:
    best: tuple[int, tuple[uuid.UUID, int], str] | None = None
    for key, member_id in owned.items():
        target = min(eligible[key], key=lambda m: (load[m], m))
        gap = load[member_id] - load[target]
        if gap > 1 and (best is None or gap > best[0]):
            best = (gap, key, target)
    return None if best is None else (best[1], best[2])


def range_assignor(members: Mapping[str, MemberSpec],
                   topics: Mapping[uuid.UUID, TopicSpec]) -> dict[str, Assignment]:
    """Contiguous ranges per topic over the subscribed members in member-id order."""
    owned: dict[tuple[uuid.UUID, int], str] = {}
    for topic_id, spec in topics.items():
        subscribers = sorted(m for m, member in members.items() if topic_id in member.topics)
        if not subscribers:
            continue
        share, extra = divmod(spec.partitions, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            count = share + (1 if index < extra else 0)
            for partition in range(start, start + count):
                owned[(topic_id, partition)] = member_id
            start += count
    return _as_assignment(owned, sorted(members))


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_assignor}

# Kafka's class names for the same assignors, accepted in group.consumer.assignors.
ASSIGNOR_ALIASES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def assignor_name(configured: str) -> str:
    """The short name of a configured assignor (Kafka's class name or the short name)."""
    return ASSIGNOR_ALIASES.get(configured, configured)
