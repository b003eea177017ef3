"""Metadata partitions encoder: the compiled ``topics[].partitions`` array of a
MetadataResponse (v0-v13).

It returns exactly what the generic codec (``pykfk.protocol``) writes for the same
partitions; the differential tests in ``tests/protocol/test_fast_path_metadata.py``
enforce it.
"""

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol, TypeAlias

METADATA_MIN_VERSION: int
METADATA_MAX_VERSION: int
METADATA_FLEXIBLE_FROM: int

class PartitionStateLike(Protocol):
    """What the encoder reads of a partition state (pykfk.cluster.metadata.PartitionState)."""

    @property
    def leader(self) -> int: ...
    @property
    def leader_epoch(self) -> int: ...
    @property
    def isr(self) -> Sequence[int]: ...

PartitionEntry: TypeAlias = tuple[int, int, int, int, Sequence[int], Sequence[int], Sequence[int]]

def encode_partitions(version: int, partitions: Sequence[PartitionEntry]) -> bytes:
    """The ``partitions`` array of one MetadataResponse topic at ``version`` (0-13), with
    its count prefix: what ``pykfk.protocol.framing.response_field_encoder(3, version,
    ("topics", "partitions"))`` writes for the same values.

    Each entry is ``(error_code, partition_index, leader_id, leader_epoch, replica_nodes,
    isr_nodes, offline_replicas)``; fields a version lacks are read but not written.
    ValueError for a version outside 0-13, an entry that is not a 7-tuple or a None array;
    OverflowError for an int that does not fit its field; TypeError for a non-integer.
    """

def encode_partition_states(
    version: int,
    states: Sequence[PartitionStateLike | None],
    assignment: Mapping[int, Sequence[int]],
    default_replicas: Sequence[int],
    live: Collection[int],
) -> bytes:
    """The ``partitions`` array of one MetadataResponse topic at ``version`` (0-13), read
    straight from a store's view: partition ``p`` has state ``states[p]`` (None: not
    elected yet), replicas ``assignment.get(p, default_replicas)``, offline replicas those
    not in ``live``. The same bytes as ``encode_partitions`` of the tuples
    ``pykfk.server.handlers.metadata.partition_entries`` builds, with no object made per
    partition; errors as ``encode_partitions``.
    """
