"""Choosing a partition for a record.

Keyed records go where the Java client's default partitioner and librdkafka's
``murmur2_random`` put them: ``toPositive(murmur2(key)) % num_partitions``, with the
32-bit murmur2 of apache/kafka ``Utils.murmur2`` (seed 0x9747b28c, little-endian 4-byte
blocks, tail bytes folded in from the highest). ``toPositive`` masks the sign bit; it is
not ``abs``. Records without a key stick to one partition until their batch is sent
(KIP-480), then move on to another.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF

Partitioner = Callable[[bytes | None, Sequence[int]], int]
"""A custom partitioner: ``(serialized key or None, partition ids) -> partition id``."""


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` as a signed 32-bit int (like the Java ``int`` result)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    blocks = length >> 2
    if blocks:
        for k in struct.unpack_from(f"<{blocks}I", data):
            k = (k * _M) & _MASK
            k ^= k >> 24
            k = (k * _M) & _MASK
            h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        base = blocks << 2
        if tail == 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h ^= data[base]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client and librdkafka murmur2_random choose for ``key``."""
    return to_positive(murmur2(key)) % num_partitions


class DefaultPartitioner:
    """murmur2 for keys; a sticky random partition for null keys, changed by the producer
    (``next_sticky``) each time a batch for the current one is sealed."""

    def __init__(self) -> None:
        self._sticky: dict[str, int] = {}

    def partition(
        self, topic: str, key: bytes | None, partitions: Sequence[int], available: Sequence[int]
    ) -> int:
        if key is not None:
            return partitions[partition_for_key(key, len(partitions))]
        sticky = self._sticky.get(topic)
        if sticky is None or sticky not in partitions:
            sticky = self.next_sticky(topic, available or partitions, None)
        return sticky

    def next_sticky(self, topic: str, candidates: Sequence[int], previous: int | None) -> int:
        """Move ``topic``'s null-key records to another partition (any but ``previous``)."""
        choices = [p for p in candidates if p != previous] or list(candidates)
        chosen = random.choice(choices)
        self._sticky[topic] = chosen
        return chosen
