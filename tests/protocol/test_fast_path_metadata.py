"""Differential tests: the compiled Metadata partitions encoder (pykfk._core.metadata)
against the generic table-driven codec, on every Metadata version, for ordinary, extreme
and hostile partition entries."""

from __future__ import annotations

import random
import struct
from typing import Any

import pytest

from pykfk._core import metadata
from pykfk.errors import ErrorCode
from pykfk.protocol import API_SPECS
from pykfk.protocol.framing import decode_response, encode_response, response_field_encoder
from pykfk.protocol.types import PreEncoded

SPEC = API_SPECS[3]
VERSIONS = range(SPEC.min_version, SPEC.max_version + 1)
FIELDS = ("error_code", "partition_index", "leader_id", "leader_epoch", "replica_nodes", "isr_nodes",
          "offline_replicas")
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _generic(version: int, partitions: list[tuple]) -> bytes:
    dicts = [dict(zip(FIELDS, p)) for p in partitions]
    return bytes(response_field_encoder(3, version, ("topics", "partitions"))(dicts))


def _assert_same(version: int, partitions: list[Any]) -> bytes:
    fast = metadata.encode_partitions(version, partitions)
    assert fast == _generic(version, [tuple(p) for p in partitions])
    return fast


PARTITION_SETS = {
    "none": [],
    "one": [(0, 0, 1, 0, (1,), (1,), ())],
    "errors": [
        (ErrorCode.LEADER_NOT_AVAILABLE, 0, -1, 4, [1, 2, 3], [], [1, 2, 3]),
        (ErrorCode.NONE, 1, 2, 7, (2, 3, 1), (2,), (1,)),
        (ErrorCode.REPLICA_NOT_AVAILABLE, 2, 3, -1, [3], [3], []),
        (-1, 3, 0, 0, [], [], []),
    ],
    "long lists": [
        (0, 5, 9, 2, list(range(300)), list(range(299, -1, -1)), list(range(0, 300, 7))),
        (0, 6, 9, 2, tuple(range(127)), tuple(range(126)), tuple(range(128))),  # around the 1-byte varint
    ],
    "extremes": [
        (-32768, INT32_MAX, INT32_MIN, INT32_MAX, [INT32_MIN, INT32_MAX, 0], [-1], [INT32_MAX]),
        (32767, INT32_MIN, INT32_MAX, INT32_MIN, [INT32_MAX], [], [INT32_MIN, -2]),
        (True, False, True, False, [True], [False], []),  # bools are ints to both encoders
    ],
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", PARTITION_SETS)
def test_bytes_equal_the_generic_encoder(version: int, name: str) -> None:
    _assert_same(version, PARTITION_SETS[name])


@pytest.mark.parametrize("version", VERSIONS)
def test_a_topic_of_thousands_of_partitions(version: int) -> None:
    rng = random.Random(version)
    brokers = list(range(1, 8))
    partitions = []
    for p in range(5000):
        replicas = rng.sample(brokers, rng.randint(1, 5))
        isr = replicas[: rng.randint(0, len(replicas))]
        offline = [r for r in replicas if r not in isr and rng.random() < 0.5]
        leader = isr[0] if isr else -1
        code = ErrorCode.NONE if isr else ErrorCode.LEADER_NOT_AVAILABLE
        partitions.append((code, p, leader, rng.randint(-1, 2**20), replicas, isr, offline))
    encoded = _assert_same(version, partitions)
    decoded = decode_response(3, version, _frame(version, encoded))[1].topics[0].partitions
    assert [(p.partition_index, p.isr_nodes) for p in decoded] == [(p[1], p[5]) for p in partitions]


def _frame(version: int, encoded: bytes) -> bytes:
    body = {"throttle_time_ms": 0, "brokers": [], "cluster_id": "c", "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "is_internal": False, "partitions": PreEncoded(encoded)}]}
    return b"".join(encode_response(3, version, 9, body))[4:]


def test_sequences_of_any_kind() -> None:
    """Lists, tuples, ranges and generators hold the same nodes; a list of lists is as good
    as a tuple of tuples."""
    plain = metadata.encode_partitions(9, [(0, 0, 1, 0, (1, 2), (1,), ())])
    assert metadata.encode_partitions(9, ([0, 0, 1, 0, [1, 2], [1], []],)) == plain
    assert metadata.encode_partitions(9, [(0, 0, 1, 0, range(1, 3), (n for n in [1]), set())]) == plain
    assert metadata.encode_partitions(9, iter([(0, 0, 1, 0, (1, 2), (1,), ())])) == plain


def test_fields_a_version_lacks_are_not_written() -> None:
    base = [(0, 0, 1, 5, (1,), (1,), (2,))]
    assert metadata.encode_partitions(4, base) == metadata.encode_partitions(4, [(0, 0, 1, 99, (1,), (1,), (7, 8))])
    assert metadata.encode_partitions(6, base) == metadata.encode_partitions(6, [(0, 0, 1, 99, (1,), (1,), (2,))])
    assert len(metadata.encode_partitions(7, base)) == len(metadata.encode_partitions(6, base)) + 4


def test_versions_outside_the_declaration_are_refused() -> None:
    assert (metadata.METADATA_MIN_VERSION, metadata.METADATA_MAX_VERSION) == (SPEC.min_version, SPEC.max_version)
    for version in (-1, SPEC.max_version + 1, 1000):
        with pytest.raises(ValueError, match=f"v{version}"):
            metadata.encode_partitions(version, [])


class _Index:
    """An int by __index__ only (struct.pack takes it too)."""

    def __init__(self, value: int):
        self.value = value

    def __index__(self) -> int:
        return self.value


class _BadIndex:
    def __index__(self) -> int:
        raise ZeroDivisionError("broken __index__")


def test_integers_by_index() -> None:
    _assert_same(12, [(_Index(3), _Index(1), 2, 3, [_Index(4)], [], [])])
    with pytest.raises(ZeroDivisionError, match="broken"):  # its own error, passed on
        metadata.encode_partitions(12, [(0, 1, 2, 3, [_BadIndex()], [], [])])


def _entry(**changes: Any) -> tuple:
    entry = dict(zip(FIELDS, (0, 1, 2, 3, [4], [4], [])))
    entry.update(changes)
    return tuple(entry.values())


HOSTILE = [  # (entry, the field at fault, error, message)
    (_entry(error_code=32768), "error_code", OverflowError, "error_code 32768 does not fit in int16"),
    (_entry(error_code=-32769), "error_code", OverflowError, "error_code"),
    (_entry(partition_index=2**31), "partition_index", OverflowError,
     "partition_index 2147483648 does not fit in int32"),
    (_entry(leader_id=-(2**31) - 1), "leader_id", OverflowError, "leader_id"),
    (_entry(leader_epoch=2**63), "leader_epoch", OverflowError, "leader_epoch"),
    (_entry(replica_nodes=[1, 2**100]), "replica_nodes", OverflowError, "replica_nodes"),
    (_entry(isr_nodes=[-(2**64)]), "isr_nodes", OverflowError, "isr_nodes"),
    (_entry(offline_replicas=[2**32]), "offline_replicas", OverflowError, "offline_replicas"),
    (_entry(leader_id=1.0), "leader_id", TypeError, "leader_id 1.0 is not an integer"),
    (_entry(partition_index="1"), "partition_index", TypeError, "partition_index '1' is not an integer"),
    (_entry(error_code=None), "error_code", TypeError, "error_code None is not an integer"),
    (_entry(isr_nodes=[None]), "isr_nodes", TypeError, "isr_nodes None is not an integer"),
    (_entry(replica_nodes=None), "replica_nodes", ValueError, "None for the non-nullable array replica_nodes"),
    (_entry(offline_replicas=None), "offline_replicas", ValueError, "offline_replicas"),
    (_entry(isr_nodes=5), "isr_nodes", TypeError, "isr_nodes 5 is not a sequence"),
    ((0, 1, 2), None, ValueError, "3 items, expected 7 (error_code"),
    ((0, 1, 2, 3, [], [], [], 9), None, ValueError, "8 items, expected 7"),
    (None, None, TypeError, "partition None is not a sequence"),
    (7, None, TypeError, "partition 7 is not a sequence"),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("entry", "field", "error", "message"), HOSTILE)
def test_hostile_values_are_refused_clearly(version: int, entry: Any, field: str | None, error: type,
                                            message: str) -> None:
    partitions = [_entry(), _entry(), entry]
    if (field == "leader_epoch" and version < 7) or (field == "offline_replicas" and version < 5):
        _assert_same(version, partitions)  # a field the version does not carry is not read
        return
    with pytest.raises(error, match="^partition entry 2: ") as caught:
        metadata.encode_partitions(version, partitions)
    assert message in str(caught.value)
    if field is not None:  # the generic encoder refuses it too (with struct's own words)
        with pytest.raises((struct.error, ValueError, TypeError)):
            _generic(version, partitions)


def test_hostile_containers() -> None:
    with pytest.raises(TypeError, match="partitions 5 is not a sequence"):
        metadata.encode_partitions(5, 5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="partitions None"):
        metadata.encode_partitions(5, None)  # type: ignore[arg-type]


def test_a_list_changed_by_its_items_during_encoding_is_safe() -> None:
    """Items read through __index__ may change the caller's lists: the encoder works on
    its own snapshot (no crash, the values as first seen)."""
    partitions: list[Any] = []
    nodes: list[Any] = []

    class Grower:
        def __index__(self) -> int:
            partitions.clear()
            nodes.clear()
            nodes.extend(range(10_000))
            return 1

    nodes.extend([Grower(), 2, 3])
    partitions.extend([(0, 0, 1, 0, nodes, [1], []), (0, 1, 1, 0, [1], [1], [])])
    encoded = metadata.encode_partitions(5, partitions)
    assert encoded == _generic(5, [(0, 0, 1, 0, [1, 2, 3], [1], []), (0, 1, 1, 0, [1], [1], [])])
