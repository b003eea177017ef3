"""Client telemetry (KIP-714): client-metrics subscriptions (CLIENT_METRICS config
resources: ``metrics``, ``interval.ms``, ``match``), the client instances the broker
knows, and the metrics they last pushed, read by the Prometheus collector.

Subscriptions are cluster metadata, as in Kafka: client-metrics config entities of the
metadata store (``/config/client-metrics/<name>`` in ZooKeeper, the embedded store's
file on a standalone broker), so a subscription set through one broker applies on
every broker, and outlives restarts. A client matches a subscription when every
``match`` pattern matches its whole attribute (no ``match``: every client); the metrics
of all its subscriptions are requested together at the shortest of their intervals. The
subscription id is a CRC-32 of those metrics, the interval and the instance id, so any
change of what a client should send changes it (PushTelemetry with an older id:
UNKNOWN_SUBSCRIPTION_ID, as Kafka answers).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
import weakref
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import cramjam

from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.cluster.metadata import CLIENT_METRICS_ENTITIES, ConfigStore
from pykfk.config import ConfigKey
from pykfk.errors import ErrorCode, KafkaError
from pykfk.server.otlp import CUMULATIVE, MalformedMetrics, OtlpMetric, decode_metrics

CLIENT_METRICS = 16  # ConfigResource type
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
TELEMETRY_MAX_BYTES = 1024 * 1024
# zstd, lz4, gzip, snappy: what Kafka accepts, in its order of preference.
ACCEPTED_COMPRESSION = (4, 3, 1, 2)
MATCH_KEYS = ("client_instance_id", "client_id", "client_software_name", "client_software_version",
              "client_source_address", "client_source_port")
MAX_INSTANCES = 16384  # the most client instances remembered, as Kafka's cache

log = logging.getLogger("pykfk.server")


def _metrics_list(value: object) -> list[str]:
    return [item.strip() for item in str(value).split(",") if item.strip()]


def _interval(value: object) -> int:
    interval = int(str(value))
    if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise ValueError(f"interval.ms must be between {MIN_INTERVAL_MS} and {MAX_INTERVAL_MS}")
    return interval


def _match(value: object) -> dict[str, re.Pattern[str]]:
    patterns: dict[str, re.Pattern[str]] = {}
    for entry in _metrics_list(value):
        key, sep, pattern = entry.partition("=")
        key = key.strip()
        if not sep or key not in MATCH_KEYS:
            raise ValueError(f"Illegal client matching pattern: {entry}")
        if key in patterns:
            raise ValueError(f"Duplicate key {key} in client matching patterns")
        try:
            patterns[key] = re.compile(pattern.strip())
        except re.error as exc:
            raise ValueError(f"Illegal regular expression in client matching pattern {entry}: {exc}") from None
    return patterns


CLIENT_METRICS_KEYS: Mapping[str, ConfigKey] = {
    "metrics": ConfigKey("metrics", _metrics_list, [],
                         "metric name prefixes to push (an empty prefix or * for every metric)", "list"),
    "interval.ms": ConfigKey("interval.ms", _interval, DEFAULT_INTERVAL_MS, "how often clients push", "int"),
    "match": ConfigKey("match", _match, [], "client attribute=regex pairs a client must all match", "list"),
}


@dataclass(frozen=True)
class Subscription:
    name: str
    metrics: tuple[str, ...]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]]

    @classmethod
    def parse(cls, name: str, configs: Mapping[str, str]) -> Subscription:
        """INVALID_CONFIG for a bad value, as Kafka's ClientMetricsConfigs."""
        try:
            metrics = tuple(_metrics_list(configs.get("metrics", "")))
            interval = _interval(configs.get("interval.ms", DEFAULT_INTERVAL_MS))
            match = _match(configs.get("match", ""))
        except ValueError as exc:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return cls(name, metrics, interval, match)

    def matches(self, attributes: Mapping[str, str]) -> bool:
        return all(p.fullmatch(attributes.get(k, "")) for k, p in self.match.items())


@dataclass
class Series:
    """One exported series: the last value of a gauge, or the running total of a sum."""
    value: float
    description: str


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    attributes: dict[str, str]
    metrics: tuple[str, ...] = ()
    interval_ms: int = DEFAULT_INTERVAL_MS
    subscription_id: int = 0
    last_seen: float = field(default_factory=time.monotonic)
    last_get: float = 0.0  # monotonic seconds of the last GetTelemetrySubscriptions
    last_push: float = 0.0  # and of the last push accepted
    terminating: bool = False
    # (prometheus kind, metric name) -> {point label items: series}
    series: dict[tuple[str, str], dict[tuple[tuple[str, str], ...], Series]] = field(default_factory=dict)

    def may_push(self, now: float) -> bool:
        """Kafka's rule: a push right after a GetTelemetrySubscriptions, else one push
        interval after the last request; an accepted push is remembered."""
        accepted = self.last_get > self.last_push or now - max(self.last_get, self.last_push) >= self.interval_ms / 1000
        if accepted:
            self.last_push = now
        return accepted

    @property
    def labels(self) -> dict[str, str]:
        """The client labels every exported series carries."""
        return {"client_id": self.attributes.get("client_id", ""), "client_instance_id": str(self.instance_id),
                "client_software_name": self.attributes.get("client_software_name", ""),
                "client_software_version": self.attributes.get("client_software_version", "")}


def _subscription_id(metrics: tuple[str, ...], interval_ms: int, instance_id: uuid.UUID) -> int:
    text = f"{','.join(metrics)}|{interval_ms}|{instance_id}".encode()
    value = zlib.crc32(text)
    return value - (1 << 32) if value >= 1 << 31 else value


def decompress(codec: int, data: bytes, limit: int) -> bytes:
    """The pushed payload uncompressed; ValueError past ``limit`` bytes or when broken.
    Output goes into a buffer of ``limit`` + 1 bytes, so a small payload that would
    expand without end (librdkafka's zstd frames do not declare their size) stops there."""
    if codec == 0:
        return data
    try:
        if codec == 1:
            out = zlib.decompressobj(wbits=47).decompress(data, limit + 1)
        elif codec == 2 and data[:8] == _XERIAL_MAGIC:
            out = _xerial(data, limit)
        elif codec in (2, 3, 4):
            buffer = bytearray(limit + 1)
            into = {2: cramjam.snappy.decompress_raw_into, 3: cramjam.lz4.decompress_into,
                    4: cramjam.zstd.decompress_into}[codec]
            out = bytes(memoryview(buffer)[:into(data, buffer)])
        else:
            raise ValueError(f"unknown compression type {codec}")
    except (cramjam.DecompressionError, zlib.error) as exc:
        raise ValueError(f"cannot decompress the metrics: {exc}") from None
    if len(out) > limit:
        raise ValueError("decompressed metrics too large")
    return out


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _xerial(data: bytes, limit: int) -> bytes:
    """Snappy in the xerial framing Java clients write (a 16-byte header, sized blocks)."""
    buffer = bytearray(limit + 1)
    at, filled = 16, 0
    while at + 4 <= len(data):
        size = int.from_bytes(data[at:at + 4], "big")
        filled += cramjam.snappy.decompress_raw_into(data[at + 4:at + 4 + size], memoryview(buffer)[filled:])
        at += 4 + size
    return bytes(buffer[:filled])


def _series_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


class ClientTelemetry:
    """The cluster's subscriptions, as this broker reads them from the metadata store,
    and the client instances this broker knows. Loop-affine."""

    def __init__(self, store: ConfigStore, clock: Clock = SYSTEM_CLOCK):
        self.store = store
        self.clock = clock  # instances' last contact and push intervals
        self.instances: dict[uuid.UUID, ClientInstance] = {}
        self._parsed: Mapping[str, Mapping[str, str]] | None = None
        self._subscriptions: dict[str, Subscription] = {}

    # -- subscriptions (CLIENT_METRICS resources) ---------------------------------------

    @property
    def configs(self) -> Mapping[str, Mapping[str, str]]:
        """Subscription name -> its settings, from the store (memory)."""
        return self.store.entity_configs(CLIENT_METRICS_ENTITIES)

    @property
    def subscriptions(self) -> Mapping[str, Subscription]:
        """The subscriptions, parsed again only after the store's snapshot changed."""
        configs = self.configs
        if configs is not self._parsed:
            parsed: dict[str, Subscription] = {}
            for name, values in configs.items():
                try:
                    parsed[name] = Subscription.parse(name, values)
                except KafkaError as exc:  # written by something that did not check it
                    log.warning("client-metrics subscription %s ignored: %s", name, exc.message)
            self._subscriptions, self._parsed = parsed, configs
        return self._subscriptions

    async def alter(self, name: str, configs: Mapping[str, str], validate_only: bool) -> None:
        """Set (or, with no settings, remove) a subscription in the store, after Kafka's
        checks: INVALID_REQUEST for no name, INVALID_CONFIG for a bad value."""
        if not name:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "Client metrics resource name must not be empty")
        Subscription.parse(name, configs)
        if not validate_only:
            await self.store.alter_entity_configs(CLIENT_METRICS_ENTITIES, name, configs)

    # -- client instances ---------------------------------------------------------------

    def instance(self, instance_id: uuid.UUID, attributes: dict[str, str]) -> ClientInstance:
        """The instance, made (or its subscription refreshed) from the current subscriptions."""
        found = self.instances.get(instance_id)
        if found is None:
            self._expire()
            found = self.instances[instance_id] = ClientInstance(instance_id, attributes)
        found.attributes.update(attributes)
        matched = [s for s in self.subscriptions.values() if s.matches(found.attributes)]
        found.metrics = tuple(sorted({m for s in matched for m in s.metrics}))
        found.interval_ms = min((s.interval_ms for s in matched), default=DEFAULT_INTERVAL_MS)
        found.subscription_id = _subscription_id(found.metrics, found.interval_ms, instance_id)
        found.last_seen = self.clock.monotonic()
        return found

    def _expire(self) -> None:
        """Forget instances not heard from for three push intervals (and the oldest past
        MAX_INSTANCES): their series leave the scrape."""
        now = self.clock.monotonic()
        for key, inst in list(self.instances.items()):
            if now - inst.last_seen > 3 * inst.interval_ms / 1000:
                del self.instances[key]
        while len(self.instances) >= MAX_INSTANCES:
            del self.instances[min(self.instances, key=lambda k: self.instances[k].last_seen)]

    def record(self, instance: ClientInstance, payload: bytes) -> None:
        """Fold a MetricsData payload into the instance's series (MalformedMetrics if broken)."""
        _resource, metrics = decode_metrics(payload)
        for metric in metrics:
            if instance.metrics and not self._requested(instance, metric.name):
                continue
            self._fold(instance, metric)

    @staticmethod
    def _requested(instance: ClientInstance, name: str) -> bool:
        return any(prefix in ("", "*") or name.startswith(prefix) for prefix in instance.metrics)

    @staticmethod
    def _fold(instance: ClientInstance, metric: OtlpMetric) -> None:
        counter = metric.kind == "sum" and metric.monotonic
        kind = "counter" if counter else "gauge"
        series = instance.series.setdefault((kind, _series_name(metric.name)), {})
        for point in metric.points:
            labels = tuple(sorted((_series_name(k), v) for k, v in point.attributes.items()))
            current = series.get(labels)
            if counter and metric.temporality != CUMULATIVE and current is not None:
                current.value += point.value  # delta temporality: the total grows by it
            else:
                series[labels] = Series(point.value, metric.description)


class _Timed(Protocol):
    @property
    def clock(self) -> Clock: ...


class TelemetryHost(Protocol):
    """What telemetry needs of the broker: its metadata store and the clock (its
    replica manager's, the broker's one clock)."""

    @property
    def metadata(self) -> ConfigStore: ...

    @property
    def replica_manager(self) -> _Timed: ...


_BY_BROKER: weakref.WeakKeyDictionary[object, ClientTelemetry] = weakref.WeakKeyDictionary()


def broker_telemetry(broker: TelemetryHost) -> ClientTelemetry:
    """The broker's telemetry state, made on first use."""
    found = _BY_BROKER.get(broker)
    if found is None:
        found = _BY_BROKER[broker] = ClientTelemetry(broker.metadata, broker.replica_manager.clock)
    return found


def find_telemetry(broker: object) -> ClientTelemetry | None:
    return _BY_BROKER.get(broker)


__all__ = ["ACCEPTED_COMPRESSION", "CLIENT_METRICS", "CLIENT_METRICS_KEYS", "TELEMETRY_MAX_BYTES",
           "ClientInstance", "ClientTelemetry", "MalformedMetrics", "broker_telemetry", "decompress",
           "find_telemetry"]
