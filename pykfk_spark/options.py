"""Options of the ``pykfk`` Spark source and sink, named and interpreted as Spark's own
Kafka integration does (Structured Streaming + Kafka Integration Guide), parsed once on
the driver into plain picklable values.

``kafka.isolation.level`` is read_uncommitted by default, as Spark's Kafka source (it
passes the Kafka consumer's default on); read_committed reads up to the last stable
offset and leaves out the records of aborted transactions.

Deviations from Spark's Kafka source: ``includeHeaders`` defaults to true (the schema
always offers ``headers`` unless it is switched off), and partitions missing from a JSON
offsets option take that option's default (earliest to start, latest to end) instead of
being an error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EARLIEST = "earliest"
LATEST = "latest"

# JSON offsets use Kafka's special values: -2 earliest, -1 latest.
JSON_EARLIEST = -2
JSON_LATEST = -1

# Bytes asked per Fetch: Kafka's fetch.max.bytes default is 50 MiB and
# max.partition.fetch.bytes 1 MiB; a reader owns one partition, so one bound serves both,
# and 8 MiB keeps a chunk's Arrow batch around 40k records of 200 bytes.
DEFAULT_FETCH_BYTES = 8 << 20

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"

TopicPartition = tuple[str, int]


class OptionError(ValueError):
    """An option is missing, unknown in that combination, or malformed."""


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends: ``kind`` is "earliest", "latest", "offsets" (per
    partition, -2/-1 allowed), "timestamp" (one ms value for all partitions) or
    "timestamps" (ms per partition)."""

    kind: str
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = -1


Subscription = tuple[str, list[str] | str | dict[str, list[int]]]


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def _int(
    options: dict[str, str], name: str, default: int | None, *, minimum: int = 0
) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise OptionError(f"option {name} must be >= {minimum}, not {value}")
    return value


def _bool(options: dict[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, not {raw!r}")
    return value == "true"


def parse_partition_json(name: str, raw: str) -> dict[TopicPartition, int]:
    """``{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}`` to {(topic, partition): n}."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OptionError(f'option {name} must be a JSON object like {{"topic": {{"0": 23}}}}')
    out: dict[TopicPartition, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: {topic!r} must map partitions to numbers")
        for part, value in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise OptionError(
                    f"option {name}: partition {part!r} of {topic!r} is not a number"
                ) from None
            if isinstance(value, bool) or not isinstance(value, int):
                raise OptionError(
                    f"option {name}: {topic}[{partition}] must be an integer, not {value!r}"
                )
            out[(topic, partition)] = value
    return out


def offsets_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-able form {"topic": {"0": n}} (Spark's Kafka offset format)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), value in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(value)
    return out


def offsets_from_json(doc: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {(topic, int(p)): int(v) for topic, parts in doc.items() for p, v in parts.items()}


def _offset_spec(
    options: dict[str, str], prefix: str, default: str, *, streaming: bool
) -> OffsetSpec:
    """startingOffsets / endingOffsets and their timestamp forms; the timestamp options
    win over the offsets option, the global timestamp over the per-partition one (Spark's
    precedence)."""
    timestamp = _int(options, f"{prefix}Timestamp", None)
    if timestamp is not None:
        return OffsetSpec("timestamp", timestamp=timestamp)
    by_timestamp = options.get(f"{prefix}OffsetsByTimestamp".lower())
    if by_timestamp is not None:
        stamps = parse_partition_json(f"{prefix}OffsetsByTimestamp", by_timestamp)
        bad = [tp for tp, ts in stamps.items() if ts < 0]
        if bad:
            raise OptionError(f"option {prefix}OffsetsByTimestamp: negative timestamp for {bad}")
        return OffsetSpec("timestamps", offsets=stamps)
    raw = options.get(f"{prefix}Offsets".lower(), default).strip()
    if raw.lower() in (EARLIEST, LATEST):
        kind = raw.lower()
        if not streaming and prefix == "starting" and kind == LATEST:
            raise OptionError("startingOffsets=latest is not allowed in a batch query")
        if prefix == "ending" and kind == EARLIEST:
            raise OptionError("endingOffsets=earliest is not allowed")
        return OffsetSpec(kind)
    offsets = parse_partition_json(f"{prefix}Offsets", raw)
    for tp, value in offsets.items():
        if value < JSON_EARLIEST:
            raise OptionError(
                f"option {prefix}Offsets: {tp[0]}[{tp[1]}] = {value} is not an offset"
            )
        if not streaming and prefix == "starting" and value == JSON_LATEST:
            raise OptionError(
                f"startingOffsets: {tp[0]}[{tp[1]}] can't be latest (-1) in a batch query"
            )
        if prefix == "ending" and value == JSON_EARLIEST:
            raise OptionError(f"endingOffsets: {tp[0]}[{tp[1]}] can't be earliest (-2)")
    return OffsetSpec("offsets", offsets=offsets)


@dataclass(frozen=True)
class ReadOptions:
    """Everything a read needs, parsed from the source options (picklable)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    timestamp_strategy: str = "error"
    max_records_per_partition: int | None = None
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = True
    fetch_max_bytes: int = DEFAULT_FETCH_BYTES
    request_timeout_ms: int = 30000
    client_id: str = "pykfk-spark"
    read_committed: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool = False) -> ReadOptions:
        opts = _lower(options)
        servers = opts.get("kafka.bootstrap.servers", "").strip()
        if not servers:
            raise OptionError("option kafka.bootstrap.servers is required")
        chosen = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
        if len(chosen) != 1:
            raise OptionError("exactly one of subscribe, subscribePattern, assign must be set")
        kind = chosen[0]
        subscription: Subscription
        if kind == "subscribe":
            topics = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
            subscription = ("subscribe", topics)
        elif kind == "subscribepattern":
            subscription = ("pattern", opts["subscribepattern"])
        else:
            assigned = parse_partition_json_list(opts["assign"])
            subscription = ("assign", assigned)
        strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError("startingOffsetsByTimestampStrategy must be error or latest")
        ending = OffsetSpec(LATEST)
        if not streaming:
            ending = _offset_spec(opts, "ending", LATEST, streaming=False)
        elif any(
            k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
        ):
            raise OptionError("ending offsets are not allowed in a streaming query")
        fetch_bytes = _int(opts, "kafka.max.partition.fetch.bytes", None, minimum=1)
        if fetch_bytes is None:
            fetch_bytes = _int(opts, "kafka.fetch.max.bytes", DEFAULT_FETCH_BYTES, minimum=1)
        return cls(
            bootstrap_servers=servers,
            subscription=subscription,
            starting=_offset_spec(
                opts, "starting", LATEST if streaming else EARLIEST, streaming=streaming
            ),
            ending=ending,
            timestamp_strategy=strategy,
            max_records_per_partition=_int(opts, "maxRecordsPerPartition", None, minimum=1),
            min_partitions=_int(opts, "minPartitions", None, minimum=1),
            max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", None, minimum=1),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            include_headers=_bool(opts, "includeHeaders", True),
            fetch_max_bytes=fetch_bytes or DEFAULT_FETCH_BYTES,
            request_timeout_ms=_int(opts, "kafka.request.timeout.ms", 30000, minimum=1) or 30000,
            client_id=opts.get("kafka.client.id", "pykfk-spark"),
            read_committed=_isolation_level(opts) == READ_COMMITTED,
        )


def _isolation_level(options: dict[str, str]) -> str:
    raw = options.get("kafka.isolation.level", READ_UNCOMMITTED)
    level = raw.strip().lower()
    if level not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise OptionError(
            f"option kafka.isolation.level must be read_committed or read_uncommitted, not {raw!r}"
        )
    return level


def parse_partition_json_list(raw: str) -> dict[str, list[int]]:
    """The ``assign`` option: ``{"topicA": [0, 1], "topicB": [2, 4]}``."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option assign is not valid JSON: {exc}") from None
    if not isinstance(doc, dict) or not all(
        isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool) for p in v)
        for v in doc.values()
    ):
        raise OptionError('option assign must look like {"topicA": [0, 1]}')
    return {str(t): list(v) for t, v in doc.items()}


@dataclass(frozen=True)
class WriteOptions:
    """Options of ``df.write.format("pykfk")``: the target, and producer settings taken
    from ``kafka.``-prefixed options (acks, compression.type, linger.ms, batch.size)."""

    bootstrap_servers: str
    topic: str | None
    acks: str = "all"
    compression_type: str | None = None
    linger_ms: float = 5.0
    batch_size: int = 512 * 1024
    client_id: str = "pykfk-spark-writer"

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> WriteOptions:
        opts = _lower(options)
        servers = opts.get("kafka.bootstrap.servers", "").strip()
        if not servers:
            raise OptionError("option kafka.bootstrap.servers is required")
        compression = opts.get("kafka.compression.type", "none").strip().lower()
        try:
            linger = float(opts.get("kafka.linger.ms", "5"))
        except ValueError:
            raise OptionError("option kafka.linger.ms must be a number") from None
        return cls(
            bootstrap_servers=servers,
            topic=(opts.get("topic") or "").strip() or None,
            acks=opts.get("kafka.acks", "all").strip(),
            compression_type=None if compression == "none" else compression,
            linger_ms=linger,
            batch_size=_int(opts, "kafka.batch.size", 512 * 1024, minimum=1) or 512 * 1024,
            client_id=opts.get("kafka.client.id", "pykfk-spark-writer"),
        )
