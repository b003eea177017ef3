"""Per-log configuration: Kafka's topic-level log settings (apache/kafka ``LogConfig``).

Topic-level names (``segment.bytes``) map to attributes (``segment_bytes``). The broker's
defaults come from ``pykfk.config.BrokerConfig``: ``LogConfig.from_properties(
broker_config.topic_config(overrides))``. Defaults here are Kafka's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

# Kafka uses Long.MAX_VALUE for "never" in flush.messages / flush.ms.
NEVER = 2**63 - 1

CREATE_TIME = "CreateTime"
LOG_APPEND_TIME = "LogAppendTime"

_TIMESTAMP_TYPES = (CREATE_TIME, LOG_APPEND_TIME)
_CLEANUP_POLICIES = ("delete", "compact")


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Settings of one partition's log. Immutable: replace it with ``dataclasses.replace``
    or ``with_overrides`` and hand the new one to ``Log.update_config``."""

    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes (1 GiB)
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms (7 days)
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    flush_interval_messages: int = NEVER  # flush.messages
    flush_interval_ms: int = NEVER  # flush.ms
    retention_ms: int = 7 * 24 * 3600 * 1000  # retention.ms (-1 = keep forever)
    retention_bytes: int = -1  # retention.bytes (-1 = no size limit)
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes (1048588)
    message_timestamp_type: str = CREATE_TIME  # message.timestamp.type
    cleanup_policy: str = "delete"  # cleanup.policy ("delete", "compact" or both)
    file_delete_delay_ms: int = 60000  # file.delete.delay.ms
    preallocate: bool = False  # preallocate
    # Log compaction (cleanup.policy=compact; pykfk.log.cleaner).
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    delete_retention_ms: int = 86_400_000  # delete.retention.ms (tombstones, 1 day)
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms

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
                     "min_compaction_lag_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ValueError(f"min_cleanable_dirty_ratio must be within [0, 1], "
                             f"got {self.min_cleanable_dirty_ratio}")
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
        """A copy with the topic-level properties in ``props`` applied."""
        values = {}
        for key, value in props.items():
            attr = _TOPIC_KEYS.get(key)
            if attr is not None and value is not None:
                values[attr] = _parse(key, attr, value)
        return dataclasses.replace(self, **values) if values else self

    def to_properties(self) -> dict[str, str]:
        """Topic-level names and string values (DescribeConfigs, persisted overrides)."""
        out = {}
        for key, attr in _TOPIC_KEYS.items():
            value = getattr(self, attr)
            out[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return out


# topic-level name -> attribute
_TOPIC_KEYS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "max_index_bytes",
    "flush.messages": "flush_interval_messages",
    "flush.ms": "flush_interval_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_bytes",
    "message.timestamp.type": "message_timestamp_type",
    "cleanup.policy": "cleanup_policy",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "preallocate": "preallocate",
    "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
}

_STRING_ATTRS = {"message_timestamp_type", "cleanup_policy"}


def _parse(key: str, attr: str, value: Any) -> Any:
    if attr in _STRING_ATTRS:
        if isinstance(value, (list, tuple)):
            return ",".join(str(v).strip() for v in value)
        return str(value).strip()
    if attr == "preallocate":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            raise ValueError(f"{key} must be true or false, got {value!r}")
        return text == "true"
    if attr == "min_cleanable_dirty_ratio":
        return _parse_float(key, value)
    return _parse_int(key, value)


def _parse_float(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{key} must be a number, got {value!r}")  # noqa: TRY004 - a bool given as a number is a bad value, reported like any other
    try:
        return float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
    except ValueError:
        raise ValueError(f"{key} must be a number, got {value!r}") from None


def _parse_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key} must be an integer, got {value!r}")  # noqa: TRY004 - a bool given as a number is a bad value, reported like any other
    try:
        return int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise ValueError(f"{key} must be an integer, got {value!r}") from None
