"""The mirror's configuration: one properties or YAML file (docs/mirror.md lists every key).

Keys follow MirrorMaker 2 where one exists (``source.alias``, ``topics``,
``replication.policy``, ``sync.topic.configs.enabled``, ``groups``...); settings of the
underlying Kafka clients pass through by prefix: ``source.<librdkafka key>`` applies to
every client of the source cluster, ``target.<key>`` to the target's, and
``source.consumer.<key>`` / ``target.producer.<key>`` to one client only. The admin work
(topics, settings, group offsets) goes through pykfk's own admin client, which takes the
security settings of the same keys (``ClientSecurity.from_librdkafka``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pykfk.client.admin import AdminClient, ClientSecurity
from pykfk.config import parse_properties
from pykfk.metrics.address import parse_listener

__all__ = ["ClientConfig", "ConfigError", "MirrorConfig", "load_config", "parse_config"]

# Client settings the mirror owns; a pass-through value would break its guarantees.
OWNED_CONSUMER_KEYS = frozenset({"enable.auto.commit", "enable.auto.offset.store", "group.id", "isolation.level"})
OWNED_PRODUCER_KEYS = frozenset({"enable.idempotence", "acks", "transactional.id"})

# librdkafka settings as confluent-kafka's clients take them.
ClientConfig = dict[str, str | int | float | bool]


class ConfigError(ValueError):
    """A missing, unknown or invalid setting; the message names it."""


@dataclass
class ClusterSettings:
    """One cluster: its alias (used in remote topic names) and librdkafka settings."""

    alias: str
    common: dict[str, str]
    consumer: dict[str, str] = field(default_factory=dict)
    producer: dict[str, str] = field(default_factory=dict)
    admin: dict[str, str] = field(default_factory=dict)

    def client(self, kind: str) -> ClientConfig:
        extra = {"consumer": self.consumer, "producer": self.producer, "admin": self.admin}[kind]
        return {**self.common, **extra}

    def admin_client(self, timeout: float) -> AdminClient:
        """pykfk's admin client for this cluster (its ``admin`` settings), each call
        bounded by ``timeout`` seconds. Connects on first use."""
        settings = self.client("admin")
        return AdminClient(str(settings["bootstrap.servers"]), timeout=timeout,
                           client_id=str(settings.get("client.id", "pykfk-mirror")),
                           security=ClientSecurity.from_librdkafka(settings))


@dataclass
class MirrorConfig:
    """Everything one mirror process needs; several processes with the same config
    (and so the same ``group_id``) share the partitions between them."""

    source: ClusterSettings
    target: ClusterSettings
    topics: list[str]
    topics_regex: str | None
    topics_exclude: str
    replication_policy: str  # "default" (<source>.<topic>) or "identity"
    separator: str
    groups_regex: str
    groups_exclude: str
    sync_topic_configs: bool
    replication_factor: int  # -1: the target broker's default.replication.factor
    group_id: str
    group_instance_id: str | None
    progress_topic: str
    checkpoints_topic: str
    offset_syncs_topic: str
    # An offset sync at least every this many source offsets per partition (MM2's
    # offset.lag.max): a group moved to the target re-reads at most this many records.
    offset_lag_max: int
    progress_interval_ms: int
    progress_max_records: int
    consume_batch_records: int
    refresh_topics_interval_ms: int
    checkpoints_interval_ms: int
    emit_checkpoints: bool
    report_interval_ms: int
    start_from: str  # "earliest" or "latest", for partitions with no progress yet
    audit_bootstrap: str | None
    audit_topic: str
    audit_tier: str
    audit_window_ms: int
    audit_interval_ms: int
    # Records and progress committed together in target transactions (docs/mirror.md,
    # "Delivery guarantee"); False: at least once, for targets without transactions.
    exactly_once: bool
    transactional_id_prefix: str
    metrics_listener: tuple[str, int] | None  # (host, port) of the Prometheus endpoint

    def matches(self, topic: str) -> bool:
        """Is ``topic`` (a source topic name) one the mirror copies? Explicitly listed
        topics always are; a regex never selects internal-looking names."""
        if topic in self.topics:
            return True
        if self.topics_regex is None or re.fullmatch(self.topics_exclude, topic):
            return False
        return re.fullmatch(self.topics_regex, topic) is not None


# key -> (default, converter). None as default means the key is required.
_SCALARS: dict[str, tuple[Any, Any]] = {
    "source.alias": (None, str),
    "target.alias": (None, str),
    "topics": ("", str),
    "topics.regex": ("", str),
    # Kafka's own internal topics, MirrorMaker's and this mirror's (*.internal) never
    # match a regex (MM2's DefaultTopicFilter excludes the same shapes).
    "topics.exclude": (r"__.*|.*\.internal|.*-internal|.*\.replica", str),
    "replication.policy": ("default", str),
    "replication.policy.separator": (".", str),
    "groups": (".*", str),
    "groups.exclude": (r"console-consumer-.*|connect-.*|__.*|pykfk-mirror-.*", str),
    "sync.topic.configs.enabled": ("true", str),
    "replication.factor": ("-1", int),
    "group.id": ("", str),
    "group.instance.id": ("", str),
    "progress.topic": ("", str),
    "checkpoints.topic": ("", str),
    "offset-syncs.topic": ("", str),
    "offset.lag.max": ("100", int),
    "progress.interval.ms": ("1000", int),
    "progress.max.records": ("20000", int),
    "consume.batch.records": ("2000", int),
    "refresh.topics.interval.ms": ("5000", int),
    "emit.checkpoints.enabled": ("true", str),
    "emit.checkpoints.interval.ms": ("5000", int),
    "report.interval.ms": ("5000", int),
    "start.from": ("earliest", str),
    "audit.bootstrap.servers": ("", str),
    "audit.topic": ("__pykfk_audit", str),
    "audit.tier": ("mirror", str),
    "audit.window.ms": ("60000", int),
    "audit.interval.ms": ("5000", int),
    "exactly.once": ("true", str),
    "transactional.id.prefix": ("", str),
    "metrics.listener": ("", str),
}

_CLIENT_KINDS = ("consumer", "producer", "admin")


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """YAML nesting (``source: {alias: a, bootstrap.servers: ...}``) as dotted keys."""
    flat: dict[str, str] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        elif isinstance(value, list):
            flat[name] = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            flat[name] = "true" if value else "false"
        else:
            flat[name] = "" if value is None else str(value)
    return flat


def load_config(path: str, overrides: Mapping[str, str] | None = None) -> MirrorConfig:
    """Read a ``.properties`` file or a ``.yaml``/``.yml`` file (needs PyYAML, in the
    ``mirror`` extra); ``overrides`` (``key=value`` from the command line) win."""
    if path.endswith((".yaml", ".yml")):
        try:
            import yaml  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:  # pragma: no cover - the mirror extra installs it
            raise ConfigError("YAML configuration needs PyYAML: pip install 'pykfk[mirror]'") from exc
        with open(path, encoding="utf-8") as f:
            tree = yaml.safe_load(f) or {}
        if not isinstance(tree, Mapping):
            raise ConfigError(f"{path}: the top level must be a mapping")
        raw = _flatten(tree)
    else:
        with open(path, encoding="utf-8") as f:
            raw = parse_properties(f.read())
    return parse_config({**raw, **(overrides or {})})


def _cluster(raw: dict[str, str], side: str, alias: str) -> ClusterSettings:
    settings = ClusterSettings(alias, {})
    prefix = f"{side}."
    for key, value in raw.items():
        if not key.startswith(prefix) or key == f"{side}.alias":
            continue
        rest = key[len(prefix):]
        kind, _, client_key = rest.partition(".")
        if kind in _CLIENT_KINDS and client_key:
            getattr(settings, kind)[client_key] = value
        else:
            settings.common[rest] = value
    if "bootstrap.servers" not in settings.common:
        raise ConfigError(f"{side}.bootstrap.servers is required")
    for key in OWNED_CONSUMER_KEYS & (settings.consumer.keys() | settings.common.keys()):
        raise ConfigError(f"{side}.{key} is set by the mirror itself")
    for key in OWNED_PRODUCER_KEYS & (settings.producer.keys() | settings.common.keys()):
        raise ConfigError(f"{side}.{key} is set by the mirror itself (idempotent, acks=all, its own transactional ids)")
    try:
        ClientSecurity.from_librdkafka(settings.client("admin"))
    except ValueError as exc:
        prefix = f"{side}.admin." if str(exc).split(":")[0] in settings.admin else f"{side}."
        raise ConfigError(f"{prefix}{exc}") from None
    return settings


def _bool(raw: dict[str, str], key: str) -> bool:
    value = raw[key].strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, not {raw[key]!r}")
    return value == "true"


def parse_config(raw_in: Mapping[str, str]) -> MirrorConfig:
    """Check and convert flat ``key -> value`` settings."""
    raw = {k.strip(): v.strip() for k, v in raw_in.items()}
    known = set(_SCALARS)
    for key in raw:
        if key not in known and not key.startswith(("source.", "target.")):
            raise ConfigError(f"unknown setting {key!r}")
    values: dict[str, Any] = {}
    for key, (default, convert) in _SCALARS.items():
        if key not in raw:
            if default is None:
                raise ConfigError(f"{key} is required")
            raw[key] = default
        try:
            values[key] = convert(raw[key])
        except ValueError as exc:
            raise ConfigError(f"{key}: {raw[key]!r} is not a number") from exc
    source_alias, target_alias = values["source.alias"], values["target.alias"]
    if source_alias == target_alias:
        raise ConfigError("source.alias and target.alias must differ")
    topics = [t.strip() for t in values["topics"].split(",") if t.strip()]
    regex = values["topics.regex"] or None
    if not topics and regex is None:
        raise ConfigError("set topics (a list) or topics.regex")
    for key in ("topics.regex", "topics.exclude", "groups", "groups.exclude"):
        try:
            re.compile(values[key])
        except re.error as exc:
            raise ConfigError(f"{key}: {exc}") from exc
    if values["replication.policy"] not in ("default", "identity"):
        raise ConfigError("replication.policy must be default or identity")
    if values["start.from"] not in ("earliest", "latest"):
        raise ConfigError("start.from must be earliest or latest")
    for key in ("progress.interval.ms", "progress.max.records", "consume.batch.records",
                "refresh.topics.interval.ms", "emit.checkpoints.interval.ms", "audit.window.ms",
                "offset.lag.max"):
        if values[key] <= 0:
            raise ConfigError(f"{key} must be positive")
    pair = f"{source_alias}-{target_alias}"
    group_id = values["group.id"] or f"pykfk-mirror-{pair}"
    return MirrorConfig(
        source=_cluster(raw, "source", source_alias),
        target=_cluster(raw, "target", target_alias),
        topics=topics,
        topics_regex=regex,
        topics_exclude=values["topics.exclude"],
        replication_policy=values["replication.policy"],
        separator=values["replication.policy.separator"],
        groups_regex=values["groups"],
        groups_exclude=values["groups.exclude"],
        sync_topic_configs=_bool(raw, "sync.topic.configs.enabled"),
        replication_factor=values["replication.factor"],
        group_id=group_id,
        group_instance_id=values["group.instance.id"] or None,
        progress_topic=values["progress.topic"] or f"pykfk-mirror.{pair}.progress.internal",
        checkpoints_topic=values["checkpoints.topic"] or f"{source_alias}.checkpoints.internal",
        offset_syncs_topic=values["offset-syncs.topic"] or f"mm2-offset-syncs.{source_alias}.internal",
        offset_lag_max=values["offset.lag.max"],
        progress_interval_ms=values["progress.interval.ms"],
        progress_max_records=values["progress.max.records"],
        consume_batch_records=values["consume.batch.records"],
        refresh_topics_interval_ms=values["refresh.topics.interval.ms"],
        checkpoints_interval_ms=values["emit.checkpoints.interval.ms"],
        emit_checkpoints=_bool(raw, "emit.checkpoints.enabled"),
        report_interval_ms=values["report.interval.ms"],
        start_from=values["start.from"],
        audit_bootstrap=values["audit.bootstrap.servers"] or None,
        audit_topic=values["audit.topic"],
        audit_tier=values["audit.tier"],
        audit_window_ms=values["audit.window.ms"],
        audit_interval_ms=values["audit.interval.ms"],
        exactly_once=_bool(raw, "exactly.once"),
        transactional_id_prefix=values["transactional.id.prefix"] or group_id,
        metrics_listener=_listener(values["metrics.listener"]),
    )


def _listener(value: str) -> tuple[str, int] | None:
    if not value:
        return None
    try:
        return parse_listener(value)
    except ValueError as exc:
        raise ConfigError(f"metrics.listener: {exc}") from exc
