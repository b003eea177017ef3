"""Replica assignment for new topics and partitions (Kafka's ``AdminUtils``
``assignReplicasToBrokers``, rack-unaware and rack-aware).

Rack-unaware: the first replica of partition p goes to broker ``(p + start) % n``, the
others follow at a shift that grows every n partitions, so leaders and followers both
spread evenly and no two replicas of a partition share a broker.

Rack-aware (every broker has a rack): brokers are first listed alternating between racks
(rack a, rack b, rack c, rack a, ...), the first replica is placed as above over that list,
and each further replica takes the next broker whose rack holds no replica of the partition
yet; once every rack has one, any broker without one of the partition's replicas.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence


class AssignmentError(ValueError):
    """The request cannot be placed (replication factor above the broker count, ...)."""


def assign_replicas(
    brokers: Sequence[int],
    partitions: int,
    replication_factor: int,
    *,
    racks: Mapping[int, str | None] | None = None,
    first_partition: int = 0,
    start_index: int | None = None,
    shift: int | None = None,
) -> dict[int, list[int]]:
    """Partition id -> replica list (the first one is the preferred leader), for
    partitions ``first_partition .. first_partition + partitions - 1``.

    ``start_index``/``shift`` fix Kafka's random starting points (tests, reproducible
    layouts). Rack-aware placement is used when every broker has a rack; when only some
    have one, AssignmentError (Kafka refuses such a mix too).
    """
    ids = sorted(set(brokers))
    n = len(ids)
    if replication_factor <= 0:
        raise AssignmentError("Replication factor must be larger than 0.")
    if partitions < 0:
        raise AssignmentError("Number of partitions must not be negative.")
    if replication_factor > n:
        raise AssignmentError(
            f"Replication factor: {replication_factor} larger than available brokers: {n}."
        )
    racks = dict(racks or {})
    with_rack = [b for b in ids if racks.get(b)]
    if with_rack and len(with_rack) != n:
        raise AssignmentError("Not all brokers have rack information for replica rack aware assignment.")
    rng = random.Random()
    start = rng.randrange(n) if start_index is None else start_index % n
    next_shift = rng.randrange(n) if shift is None else shift % n
    if with_rack:
        return _rack_aware(ids, racks, partitions, replication_factor, first_partition, start, next_shift)
    return _rack_unaware(ids, partitions, replication_factor, first_partition, start, next_shift)


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    # Kafka's replicaIndex: never lands on ``first`` because the step is 1..n-1.
    return (first + 1 + (shift + j) % (n - 1)) % n


def _rack_unaware(
    ids: list[int], partitions: int, factor: int, first_partition: int, start: int, shift: int
) -> dict[int, list[int]]:
    n = len(ids)
    out: dict[int, list[int]] = {}
    current = max(0, first_partition)
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        replicas = [ids[first]]
        replicas += [ids[_replica_index(first, shift, j, n)] for j in range(factor - 1)]
        out[current] = replicas
        current += 1
    return out


def _alternate_racks(ids: list[int], racks: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered rack a, rack b, ..., rack a, ... (Kafka's getRackAlternatedBrokerList)."""
    by_rack: dict[str, list[int]] = {}
    for b in ids:
        by_rack.setdefault(str(racks[b]), []).append(b)
    names = sorted(by_rack)
    out: list[int] = []
    depth = 0
    while len(out) < len(ids):
        for name in names:
            members = by_rack[name]
            if depth < len(members):
                out.append(members[depth])
        depth += 1
    return out


def _rack_aware(
    ids: list[int],
    racks: Mapping[int, str | None],
    partitions: int,
    factor: int,
    first_partition: int,
    start: int,
    shift: int,
) -> dict[int, list[int]]:
    ordered = _alternate_racks(ids, racks)
    n = len(ordered)
    rack_count = len({racks[b] for b in ids})
    out: dict[int, list[int]] = {}
    current = max(0, first_partition)
    for _ in range(partitions):
        if current > 0 and current % n == 0:
            shift += 1
        first = (current + start) % n
        leader = ordered[first]
        replicas = [leader]
        used_racks = {racks[leader]}
        k = 0
        while len(replicas) < factor:
            candidate = ordered[_replica_index(first, shift, k, n)]
            k += 1
            if candidate in replicas:
                continue
            if racks[candidate] in used_racks and len(used_racks) < rack_count and k < 4 * n:
                continue  # a later broker on a new rack exists: keep looking
            replicas.append(candidate)
            used_racks.add(racks[candidate])
        out[current] = replicas
        current += 1
    return out
