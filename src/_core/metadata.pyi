"""Metadata partitions encoder: the compiled ``topics[].partitions`` array of a
MetadataResponse (v0-v12).

It returns exactly what the generic codec (``pykfk.protocol``) writes for the same
partitions; the differential tests in ``tests/protocol/test_fast_path_metadata.py``
enforce it.
"""

from collections.abc import Sequence
from typing import TypeAlias

METADATA_MIN_VERSION: int
METADATA_MAX_VERSION: int
METADATA_FLEXIBLE_FROM: int

PartitionEntry: TypeAlias = tuple[int, int, int, int, Sequence[int], Sequence[int], Sequence[int]]

def encode_partitions(version: int, partitions: Sequence[PartitionEntry]) -> bytes:
    """The ``partitions`` array of one MetadataResponse topic at ``version`` (0-12), with
    its count prefix: what ``pykfk.protocol.framing.response_field_encoder(3, version,
    ("topics", "partitions"))`` writes for the same values.

    Each entry is ``(error_code, partition_index, leader_id, leader_epoch, replica_nodes,
    isr_nodes, offline_replicas)``; fields a version lacks are read but not written.
    ValueError for a version outside 0-12, an entry that is not a 7-tuple or a None array;
    OverflowError for an int that does not fit its field; TypeError for a non-integer.
    """
