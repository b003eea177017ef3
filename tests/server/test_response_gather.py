"""Small Fetch answers go out in one send with their record bytes read from the segment
files; large ones keep sendfile. Either way the client gets the same bytes."""

from __future__ import annotations

import os

import pytest

from pykfk._core.records import build_batch
from pykfk._core.sendfile import gather
from pykfk.protocol.types import FileRegion
from pykfk.server import connection
from pykfk.server.connection import GATHER_BYTES_MAX

from .test_handlers import FETCH, PRODUCE, create_topic

TOPIC = "gather"


@pytest.fixture
def segment_file(tmp_path):
    path = tmp_path / "segment.log"
    path.write_bytes(bytes(range(256)) * 64)  # 16 KiB of known bytes
    fd = os.open(path, os.O_RDONLY)
    yield fd
    os.close(fd)


def test_a_small_answer_is_one_buffer_with_the_region_bytes_in_place(segment_file):
    chunks = [b"head", FileRegion(segment_file, 10, 20), memoryview(b"mid"),
              FileRegion(segment_file, 300, 0), bytearray(b"x"), FileRegion(segment_file, 1000, 500), b"tail"]
    expected = b"head" + (bytes(range(256)) * 64)[10:30] + b"mid" + b"x" + (bytes(range(256)) * 64)[1000:1500] + b"tail"
    assert bytes(gather(chunks, GATHER_BYTES_MAX)) == expected


def test_answers_without_regions_or_over_the_limit_are_left_alone(segment_file):
    assert gather([b"a", b"b"], GATHER_BYTES_MAX) is None
    assert gather([b"a" * GATHER_BYTES_MAX, FileRegion(segment_file, 0, 1)], GATHER_BYTES_MAX) is None


def test_a_region_past_the_end_of_its_file_is_an_error_not_short_data(segment_file):
    with pytest.raises(EOFError):
        gather([b"h", FileRegion(segment_file, 16 * 1024 - 10, 20)], GATHER_BYTES_MAX)


def _produce(raw, partition: int, values: list[bytes]) -> None:
    batch = build_batch([(None, v, 1000 + i, []) for i, v in enumerate(values)])
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": partition, "records": batch}]}]}
    part = raw.call(PRODUCE, 7, body).responses[0].partition_responses[0]
    assert part.error_code == 0


def _fetch_all(raw, partitions: int) -> dict[int, bytes]:
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": TOPIC, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": 0, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 22} for p in range(partitions)]}]}
    response = raw.call(FETCH, 11, body)
    parts = response.responses[0].partitions
    assert [p.error_code for p in parts] == [0] * partitions
    return {p.partition_index: bytes(p.records) for p in parts}


@pytest.mark.parametrize("value_size", [100, 40_000], ids=["gathered", "sendfile"])
def test_a_fetch_over_several_partitions_returns_every_batch_whole(raw, value_size, monkeypatch):
    """Four partitions of small batches fit in one gathered send; with 40 KB values the
    answer is past the limit and goes by sendfile. The bytes are the produced batches."""
    sendfile_calls = []

    def counting_sendfile(*args: int) -> int:
        sendfile_calls.append(args)
        return connection._sendfile_original(*args)

    monkeypatch.setattr(connection, "_sendfile_original", connection._sendfile, raising=False)
    monkeypatch.setattr(connection, "_sendfile", counting_sendfile)
    assert create_topic(raw, TOPIC, partitions=4)[0] == 0
    produced: dict[int, bytes] = {}
    for partition in range(4):
        values = [bytes([partition + i]) * value_size for i in range(3)]
        _produce(raw, partition, values[:2])
        _produce(raw, partition, values[2:])
        produced[partition] = b"".join(values)
    fetched = _fetch_all(raw, 4)
    for partition in range(4):
        records = fetched[partition]
        # Two whole batches, holding the produced values in order.
        assert len(records) > 3 * value_size
        position = 0
        for value in produced[partition][:value_size], produced[partition][2 * value_size:]:
            assert value in records[position:]
            position = records.index(value, position) + len(value)
    assert (len(sendfile_calls) == 0) == (value_size * 12 < GATHER_BYTES_MAX)
