"""Planning a read: starting/ending options resolved to offsets with ListOffsets, and the
offset ranges cut into Spark input partitions (one task each).

Splitting follows Spark's KafkaOffsetRangeCalculator in spirit: one partition per topic
partition, cut into pieces of at most ``maxRecordsPerPartition`` offsets, and big ranges
cut further when ``minPartitions`` asks for more tasks than that gives.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from pyspark.sql.datasource import InputPartition

from .client import DataLossError, OffsetClient
from .options import JSON_EARLIEST, JSON_LATEST, OffsetSpec, OptionError, ReadOptions

TopicPartition = tuple[str, int]


class OffsetRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark task. ``leader`` is the
    (host, port) that led the partition when planned (the reader looks again if it
    moved). Picklable; carries no connection."""

    def __init__(
        self,
        topic: str,
        partition: int,
        start: int,
        end: int,
        leader: tuple[str, int] | None = None,
    ):
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.leader = leader

    @property
    def count(self) -> int:
        return self.end - self.start

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}[{self.partition}] {self.start}..{self.end})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OffsetRange) and (
            self.topic,
            self.partition,
            self.start,
            self.end,
        ) == (other.topic, other.partition, other.start, other.end)

    def __hash__(self) -> int:
        return hash((self.topic, self.partition, self.start, self.end))


def subscribed_partitions(client: OffsetClient, options: ReadOptions) -> list[TopicPartition]:
    kind, value = options.subscription
    if kind == "subscribe":
        return client.partitions(topics=value)  # type: ignore[arg-type]
    if kind == "pattern":
        return client.partitions(pattern=value)  # type: ignore[arg-type]
    return client.partitions(assign=value)  # type: ignore[arg-type]


def resolve_offsets(
    client: OffsetClient,
    spec: OffsetSpec,
    tps: Iterable[TopicPartition],
    *,
    ending: bool,
    options: ReadOptions,
    earliest: Mapping[TopicPartition, int],
    latest: Mapping[TopicPartition, int],
) -> dict[TopicPartition, int]:
    """Offsets for ``tps`` from one starting/ending spec, within [earliest, latest]."""
    tps = list(tps)
    name = "endingOffsets" if ending else "startingOffsets"
    if spec.kind == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec.kind == "latest":
        return {tp: latest[tp] for tp in tps}
    if spec.kind == "offsets":
        unknown = sorted(set(spec.offsets) - set(tps))
        if unknown:
            raise OptionError(f"{name} names partitions outside the subscription: {unknown}")
        out = {}
        for tp in tps:
            value = spec.offsets.get(tp, JSON_LATEST if ending else JSON_EARLIEST)
            if value == JSON_EARLIEST:
                value = earliest[tp]
            elif value == JSON_LATEST:
                value = latest[tp]
            out[tp] = _within(tp, value, earliest[tp], latest[tp], name, options)
        return out
    if spec.kind == "timestamps":
        unknown = sorted(set(spec.offsets) - set(tps))
        if unknown:
            raise OptionError(
                f"{name}ByTimestamp names partitions outside the subscription: {unknown}"
            )
        stamps = {tp: spec.offsets[tp] for tp in tps if tp in spec.offsets}
        found = client.list_offsets(stamps) if stamps else {}
        defaults = latest if ending else earliest
        out = {tp: defaults[tp] for tp in tps if tp not in stamps}
    else:
        stamps = {tp: spec.timestamp for tp in tps}
        found = client.list_offsets(stamps) if stamps else {}
        out = {}
    for tp, offset in found.items():
        if offset >= 0:
            out[tp] = offset
        elif ending or options.timestamp_strategy == "latest":
            out[tp] = latest[tp]  # no record that late: everything up to the end
        else:
            raise OptionError(
                f"no offset of {tp[0]}[{tp[1]}] has a timestamp >= {stamps[tp]} "
                f"(set startingOffsetsByTimestampStrategy=latest to start at the end)"
            )
    return out


def _within(
    tp: TopicPartition, value: int, earliest: int, latest: int, name: str, options: ReadOptions
) -> int:
    fail = options.fail_on_data_loss
    if value < earliest:
        if fail:
            raise DataLossError(
                f"{name}: {tp[0]}[{tp[1]}] offset {value} was deleted (log starts at {earliest}); "
                f"set failOnDataLoss=false to start at {earliest}"
            )
        return earliest
    if value > latest:
        if fail:
            end = (
                f"the last stable offset {latest} (read_committed reads no further)"
                if options.read_committed
                else f"the log end {latest}"
            )
            raise OptionError(f"{name}: {tp[0]}[{tp[1]}] offset {value} is beyond {end}")
        return latest
    return value


def split_ranges(
    ranges: list[OffsetRange], max_records: int | None = None, min_partitions: int | None = None
) -> list[OffsetRange]:
    """Empty ranges dropped; each cut into pieces of at most ``max_records`` offsets, and
    into more pieces (in proportion to size) while fewer than ``min_partitions``."""
    ranges = [r for r in ranges if r.end > r.start]
    pieces = {id(r): 1 if not max_records else math.ceil(r.count / max_records) for r in ranges}
    total_pieces = sum(pieces.values())
    if min_partitions and total_pieces < min_partitions:
        total = sum(r.count for r in ranges)
        for r in ranges:
            pieces[id(r)] = max(pieces[id(r)], math.ceil(r.count * min_partitions / total))
    out = []
    for r in ranges:
        n = min(pieces[id(r)], r.count)
        step, extra = divmod(r.count, n)
        start = r.start
        for i in range(n):
            end = start + step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end, r.leader))
            start = end
    return out


def plan_batch(options: ReadOptions) -> list[OffsetRange]:
    """The input partitions of a batch read, from the brokers' current offsets."""
    with OffsetClient(
        options.bootstrap_servers,
        client_id=options.client_id,
        request_timeout_ms=options.request_timeout_ms,
        read_committed=options.read_committed,
    ) as client:
        tps = subscribed_partitions(client, options)
        if not tps:
            return []
        earliest = client.earliest(tps)
        latest = client.latest(tps)
        common = {"options": options, "earliest": earliest, "latest": latest}
        start = resolve_offsets(client, options.starting, tps, ending=False, **common)
        end = resolve_offsets(client, options.ending, tps, ending=True, **common)
        ranges = []
        for tp in tps:
            if end[tp] < start[tp]:
                raise OptionError(
                    f"{tp[0]}[{tp[1]}]: ending offset {end[tp]} is before starting offset {start[tp]}"
                )
            ranges.append(OffsetRange(tp[0], tp[1], start[tp], end[tp], client.leader_address(*tp)))
    return split_ranges(ranges, options.max_records_per_partition, options.min_partitions)
