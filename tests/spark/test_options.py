"""Option parsing and range planning of the pykfk Spark source (no Spark, no broker)."""

from __future__ import annotations

import itertools
import pickle

import pytest

from pykfk_spark.datasource import rate_limit
from pykfk_spark.options import (
    OffsetSpec,
    OptionError,
    ReadOptions,
    WriteOptions,
    offsets_from_json,
    offsets_json,
)
from pykfk_spark.planner import OffsetRange, split_ranges

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a, b"}


def test_defaults_follow_sparks_kafka_source() -> None:
    batch = ReadOptions.parse(BASE)
    assert batch.subscription == ("subscribe", ["a", "b"])
    assert batch.starting == OffsetSpec("earliest") and batch.ending == OffsetSpec("latest")
    assert batch.fail_on_data_loss and batch.include_headers
    stream = ReadOptions.parse(BASE, streaming=True)
    assert stream.starting == OffsetSpec("latest")


def test_option_names_are_case_insensitive() -> None:
    opts = ReadOptions.parse(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "SubscribePattern": "t-.*",
            "MAXRECORDSPERPARTITION": "10",
            "startingoffsets": '{"t-1": {"0": 5, "1": -2}}',
            "failondataloss": "FALSE",
        }
    )
    assert opts.subscription == ("pattern", "t-.*")
    assert opts.max_records_per_partition == 10 and not opts.fail_on_data_loss
    assert opts.starting == OffsetSpec("offsets", offsets={("t-1", 0): 5, ("t-1", 1): -2})


def test_timestamp_options_take_precedence() -> None:
    opts = ReadOptions.parse(
        {
            **BASE,
            "startingOffsets": "earliest",
            "startingTimestamp": "1000",
            "startingOffsetsByTimestamp": '{"a": {"0": 5}}',
            "endingOffsetsByTimestamp": '{"a": {"1": 9}}',
        }
    )
    assert opts.starting == OffsetSpec("timestamp", timestamp=1000)
    assert opts.ending == OffsetSpec("timestamps", offsets={("a", 1): 9})


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"kafka.bootstrap.servers": ""}, "bootstrap"),
        ({"subscribePattern": "x"}, "exactly one"),
        ({"startingOffsets": "latest"}, "not allowed in a batch"),
        ({"endingOffsets": "earliest"}, "not allowed"),
        ({"startingOffsets": '{"a": {"0": -1}}'}, "can't be latest"),
        ({"endingOffsets": '{"a": {"0": -2}}'}, "can't be earliest"),
        ({"startingOffsets": '{"a": {"x": 1}}'}, "not a number"),
        ({"startingOffsets": '{"a": {"0": "1"}}'}, "must be an integer"),
        ({"startingOffsets": "{nope"}, "not valid JSON"),
        ({"startingOffsets": '{"a": {"0": -3}}'}, "is not an offset"),
        ({"maxRecordsPerPartition": "0"}, ">= 1"),
        ({"maxRecordsPerPartition": "ten"}, "must be an integer"),
        ({"failOnDataLoss": "maybe"}, "true or false"),
        ({"startingOffsetsByTimestampStrategy": "earliest"}, "error or latest"),
        ({"startingOffsetsByTimestamp": '{"a": {"0": -5}}'}, "negative timestamp"),
    ],
)
def test_bad_options_are_refused_precisely(extra: dict, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        ReadOptions.parse({**BASE, **extra})


def test_streaming_refuses_ending_offsets() -> None:
    with pytest.raises(OptionError, match="streaming"):
        ReadOptions.parse({**BASE, "endingOffsets": "latest"}, streaming=True)


def test_assign_option() -> None:
    opts = ReadOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [0, 2]}'})
    assert opts.subscription == ("assign", {"a": [0, 2]})
    with pytest.raises(OptionError, match="assign"):
        ReadOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"a": 0}'})


def test_write_options() -> None:
    opts = WriteOptions.parse(
        {"kafka.bootstrap.servers": "h:1", "topic": "out", "kafka.compression.type": "LZ4"}
    )
    assert opts.topic == "out" and opts.compression_type == "lz4" and opts.acks == "all"


def test_offsets_json_round_trip() -> None:
    offsets = {("a", 0): 5, ("a", 10): 7, ("b", 1): 0}
    doc = offsets_json(offsets)
    assert doc == {"a": {"0": 5, "10": 7}, "b": {"1": 0}}
    assert offsets_from_json(doc) == offsets


def test_split_by_max_records() -> None:
    ranges = [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 3, 6)]
    out = split_ranges(ranges, max_records=4)
    assert [(r.partition, r.start, r.end) for r in out] == [
        (0, 0, 4),
        (0, 4, 7),
        (0, 7, 10),
        (2, 3, 6),
    ]


def test_split_for_min_partitions_is_proportional_and_exact() -> None:
    ranges = [OffsetRange("t", 0, 0, 90), OffsetRange("t", 1, 0, 10)]
    out = split_ranges(ranges, min_partitions=10)
    assert len(out) >= 10
    assert sum(r.count for r in out) == 100
    assert sum(1 for r in out if r.partition == 0) == 9
    for p in (0, 1):  # contiguous, in order, nothing lost or doubled
        mine = [r for r in out if r.partition == p]
        assert mine[0].start == 0 and all(a.end == b.start for a, b in itertools.pairwise(mine))


def test_offset_range_pickles_without_connections() -> None:
    r = OffsetRange("t", 3, 10, 20, ("127.0.0.1", 9092))
    clone = pickle.loads(pickle.dumps(r))
    assert clone == r and clone.leader == ("127.0.0.1", 9092)


def test_rate_limit_is_proportional_to_lag() -> None:
    begin = {("t", 0): 0, ("t", 1): 100, ("t", 2): 50}
    end = {("t", 0): 300, ("t", 1): 200, ("t", 2): 50}
    cut = rate_limit(begin, end, 200)
    assert cut == {("t", 0): 150, ("t", 1): 150, ("t", 2): 50}
    assert rate_limit(begin, end, 1000) == end
    assert rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1000, ("t", 1): 1}, 10)[("t", 1)] == 1


def test_isolation_level() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    assert ReadOptions.parse(base).read_committed is False  # Spark's default
    assert ReadOptions.parse({**base, "kafka.isolation.level": "read_committed"}).read_committed
    assert not ReadOptions.parse({**base, "kafka.isolation.level": "READ_UNCOMMITTED"}).read_committed
    with pytest.raises(OptionError, match="kafka.isolation.level must be read_committed or"):
        ReadOptions.parse({**base, "kafka.isolation.level": "committed"})
