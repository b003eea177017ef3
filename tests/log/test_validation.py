"""pykfk.log.validation on a Log: recompression keeps everything of a batch but its codec
(and honours the KIP-390 levels), the CreateTime window refuses what lies outside it,
even a record hidden behind a batch header by a negative timestamp delta."""

from __future__ import annotations

import pytest

from pykfk._core import records as core_records
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log.config import LogConfig
from pykfk.log.log import Log
from pykfk.log.validation import check_timestamps

NOW = 1_800_000_000_000
CODECS = {"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _records(n: int, base_ts: int = NOW) -> list[tuple[bytes, bytes, int, list[tuple[str, bytes]]]]:
    return [(f"k{i}".encode(), f"value {i} ".encode() * 30, base_ts + i, [("h", str(i).encode())]) for i in range(n)]


def _open(tmp_path, **settings: str) -> Log:
    return Log(str(tmp_path / "t-0"), LogConfig.from_properties(settings))


@pytest.mark.parametrize("target", ["uncompressed", "gzip", "snappy", "lz4", "zstd"])
def test_recompression_keeps_all_but_the_codec(tmp_path, target):
    log = _open(tmp_path, **{"compression.type": target})
    source = 4 if target != "zstd" else 1
    idempotent = core_records.build_batch(_records(20), compression=source, producer_id=7, producer_epoch=2,
                                          base_sequence=0)
    transactional = core_records.build_batch(_records(5), compression=source, producer_id=8, producer_epoch=0,
                                             base_sequence=0, is_transactional=True)
    try:
        first = log.append(idempotent, leader_epoch=3)
        second = log.append(transactional, leader_epoch=3)
        batches = core_records.decode_records(_read_all(log), include_control=True).batches
        assert [b.compression for b in batches] == [CODECS[target]] * 2
        one, two = batches
        assert (one.base_offset, one.last_offset_delta, one.producer_id, one.producer_epoch, one.base_sequence,
                one.partition_leader_epoch) == (0, 19, 7, 2, 0, 3)
        assert two.is_transactional and two.producer_id == 8 and two.base_offset == 20
        decoded = core_records.decode_records(_read_all(log))
        assert list(decoded.offsets) == list(range(25))
        assert decoded.key(19) == b"k19" and decoded.value(19) == b"value 19 " * 30
        assert decoded.headers(19) == [("h", b"19")] and decoded.timestamps[19] == NOW + 19
        assert (first.first_offset, second.first_offset) == (0, 20)
    finally:
        log.close()


def _read_all(log: Log) -> bytes:
    region = log.read(0, 1 << 20).file_region
    assert region is not None
    return region.read()


def test_levels_change_what_is_stored(tmp_path):
    sizes = {}
    for level in ("1", "19"):
        log = _open(tmp_path / level, **{"compression.type": "zstd", "compression.zstd.level": level})
        try:
            log.append(core_records.build_batch(_records(200), compression=1))
            sizes[level] = log.log_end_offset, len(_read_all(log))
        finally:
            log.close()
    assert sizes["1"][0] == sizes["19"][0] == 200
    assert sizes["19"][1] < sizes["1"][1]


def test_the_timestamp_window(tmp_path):
    inside = core_records.build_batch(_records(3, NOW - 1000))
    headers = core_records.validate_batches(inside)
    check_timestamps(memoryview(inside), headers, (5000, 5000), NOW)
    with pytest.raises(KafkaError) as old:
        check_timestamps(memoryview(inside), headers, (500, 5000), NOW)
    assert old.value.code == ErrorCode.INVALID_TIMESTAMP and "message.timestamp.before.max.ms" in str(old.value)
    # A record older than its batch's base timestamp (a negative delta): the headers do
    # not show it, the records do.
    hidden = core_records.build_batch([(b"a", b"1", NOW, None), (b"b", b"2", NOW - 10_000, None)])
    hidden_headers = core_records.validate_batches(hidden)
    with pytest.raises(KafkaError):
        check_timestamps(memoryview(hidden), hidden_headers, (5000, 5000), NOW)
