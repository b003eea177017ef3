"""Per-log configuration: Kafka's topic-level log settings (apache/kafka ``LogConfig``).

Topic-level names (``segment.bytes``) map to attributes (``segment_bytes``); names,
parsers, defaults and attributes come from the one declaration, ``pykfk.config.TOPIC_KEYS``.
The broker's defaults come from ``pykfk.config.BrokerConfig``: ``LogConfig.from_properties(
broker_config.topic_config(overrides))``. Defaults here are Kafka's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

from pykfk.config import TOPIC_KEYS, ConfigError, TopicKey

# Kafka uses Long.MAX_VALUE for "never" in flush.messages / flush.ms.
NEVER = 2**63 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

_TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
# compression.type -> the batch codec it stores (None: the producer's, kept as sent).
_CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_CLEANUP_POLICIES = ("delete", "compact")


def _field_value(key: TopicKey, value: Any) -> Any:
    """A parsed topic setting as LogConfig holds it (cleanup.policy as one string)."""
    return ",".join(value) if isinstance(value, list) else value


def _default(name: str) -> Any:
    return _field_value(TOPIC_KEYS[name], TOPIC_KEYS[name].default)


# The topic settings that are log settings: topic-level name -> declaration.
LOG_KEYS: dict[str, TopicKey] = {name: key for name, key in TOPIC_KEYS.items() if key.attr is not None}


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Settings of one partition's log. Immutable: replace it with ``dataclasses.replace``
    or ``with_overrides`` and hand the new one to ``Log.update_config``."""

    segment_bytes: int = _default("segment.bytes")
    segment_ms: int = _default("segment.ms")
    index_interval_bytes: int = _default("index.interval.bytes")
    max_index_bytes: int = _default("segment.index.bytes")
    flush_interval_messages: int = _default("flush.messages")
    flush_interval_ms: int = _default("flush.ms")
    retention_ms: int = _default("retention.ms")  # -1 = keep forever
    retention_bytes: int = _default("retention.bytes")  # -1 = no size limit
    max_message_bytes: int = _default("max.message.bytes")
    message_timestamp_type: str = _default("message.timestamp.type")
    cleanup_policy: str = _default("cleanup.policy")  # "delete", "compact" or both
    file_delete_delay_ms: int = _default("file.delete.delay.ms")
    preallocate: bool = _default("preallocate")
    # Log compaction (cleanup.policy=compact; pykfk.log.cleaner).
    min_cleanable_dirty_ratio: float = _default("min.cleanable.dirty.ratio")
    delete_retention_ms: int = _default("delete.retention.ms")  # tombstones
    min_compaction_lag_ms: int = _default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("max.compaction.lag.ms")
    segment_jitter_ms: int = _default("segment.jitter.ms")
    # Produce-side checks: the codec batches are stored with (pykfk.log.recompress) and
    # the CreateTime window of KIP-937.
    compression_type: str = _default("compression.type")
    compression_gzip_level: int = _default("compression.gzip.level")
    compression_lz4_level: int = _default("compression.lz4.level")
    compression_zstd_level: int = _default("compression.zstd.level")
    message_timestamp_before_max_ms: int = _default("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _default("message.timestamp.after.max.ms")
    message_timestamp_difference_max_ms: int = _default("message.timestamp.difference.max.ms")

    def __post_init__(self) -> None:
        # Lower bounds are Kafka's (TopicConfig validators): segment.bytes >= 14 (one legacy
        # message header), segment.index.bytes >= 4, index.interval.bytes >= 0.
        for name, minimum in (("segment_bytes", 14), ("max_index_bytes", 4),
                              ("index_interval_bytes", 0)):
            if getattr(self, name) < minimum:
                raise ValueError(f"{name} must be at least {minimum}, got {getattr(self, name)}")
        # Index entries hold int32 positions, so a segment cannot outgrow 2 GiB (Kafka's
        # segment.bytes is an int for the same reason).
        if self.segment_bytes > 2**31 - 1:
            raise ValueError(f"segment_bytes must be at most 2147483647, got {self.segment_bytes}")
        for name in ("segment_ms", "flush_interval_messages", "flush_interval_ms",
                     "max_message_bytes", "file_delete_delay_ms", "delete_retention_ms",
                     "min_compaction_lag_ms", "segment_jitter_ms", "message_timestamp_before_max_ms",
                     "message_timestamp_after_max_ms", "message_timestamp_difference_max_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(f"min_cleanable_dirty_ratio must be within [0, 1], "
                             f"got {self.min_cleanable_dirty_ratio}")
        if self.max_compaction_lag_ms < 1:
            raise ValueError(f"max_compaction_lag_ms must be at least 1, got {self.max_compaction_lag_ms}")
        if self.compression_type not in _CODECS:
            raise ValueError(f"compression_type must be one of {tuple(_CODECS)}, got {self.compression_type!r}")
        if self.flush_interval_messages == 0:
            raise ValueError("flush_interval_messages must be at least 1")
        for name in ("retention_ms", "retention_bytes"):
            if getattr(self, name) < -1:
                raise ValueError(f"{name} must be -1 or more, got {getattr(self, name)}")
        if self.message_timestamp_type not in _TIMESTAMP_TYPES:
            raise ValueError(
                f"message_timestamp_type must be one of {_TIMESTAMP_TYPES}, "
                f"got {self.message_timestamp_type!r}")
        policies = self.cleanup_policies
        if not policies or any(p not in _CLEANUP_POLICIES for p in policies):
            raise ValueError(f"cleanup_policy must be delete and/or compact, "
                             f"got {self.cleanup_policy!r}")

    @functools.cached_property
    def cleanup_policies(self) -> tuple[str, ...]:
        # Cached: asked on every append; the dataclass is frozen, so it never changes.
        return tuple(p.strip() for p in self.cleanup_policy.split(",") if p.strip())

    @property
    def deletes_segments(self) -> bool:
        """True when retention may delete old segments (cleanup.policy contains delete)."""
        return "delete" in self.cleanup_policies

    @property
    def compacts(self) -> bool:
        """True when the log cleaner compacts this log (cleanup.policy contains compact)."""
        return "compact" in self.cleanup_policies

    @functools.cached_property
    def max_segment_ms(self) -> int:
        """Kafka's maxSegmentMs: a compacted log rolls its active segment within
        max.compaction.lag.ms too, so the cleaner can reach every record in time."""
        if self.compacts:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @functools.cached_property
    def stored_codec(self) -> int | None:
        """The codec every stored batch must have (None: whatever the producer sent)."""
        return _CODECS[self.compression_type]

    @property
    def compression_level(self) -> int | None:
        """The level of ``stored_codec`` (None: the codec has none, or zlib's default)."""
        level = {1: self.compression_gzip_level, 3: self.compression_lz4_level,
                 4: self.compression_zstd_level}.get(self.stored_codec or 0)
        return None if level == -1 else level

    @functools.cached_property
    def timestamp_window(self) -> tuple[int, int] | None:
        """(before, after) ms a CreateTime record may lie from the broker's clock (KIP-937;
        message.timestamp.difference.max.ms bounds both), None when unbounded."""
        if self.log_append_time:
            return None
        difference = self.message_timestamp_difference_max_ms
        before = min(self.message_timestamp_before_max_ms, difference)
        after = min(self.message_timestamp_after_max_ms, difference)
        return None if before == after == NEVER else (before, after)

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == LOG_APPEND_TIME

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """A config from topic-level properties (``segment.bytes`` ...) laid over ``base``
        (Kafka's defaults when None). Values may be strings, as read from a properties
        file or a CreateTopics request. Keys that are not log settings are ignored."""
        return (base or cls()).with_overrides(props)

    def with_overrides(self, props: Mapping[str, Any]) -> LogConfig:
        """A copy with the topic-level properties in ``props`` applied; ConfigError (a
        ValueError) names the first bad one."""
        values = {}
        for name, raw in props.items():
            key = LOG_KEYS.get(name)
            if key is None or raw is None:
                continue
            try:
                values[key.attr] = _field_value(key, key.parse(raw))
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
        return dataclasses.replace(self, **values) if values else self  # type: ignore[arg-type]

    def to_properties(self) -> dict[str, str]:
        """Topic-level names and string values (DescribeConfigs, persisted overrides)."""
        out = {}
        for name, key in LOG_KEYS.items():
            value = getattr(self, str(key.attr))
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out
