"""Consumer groups (the classic group protocol) and committed offsets kept in the internal
topic ``__consumer_offsets``. See ``README.md`` in this directory."""

from pykfk.group.coordinator import GroupConfig, GroupCoordinator
from pykfk.group.offsets import OFFSETS_TOPIC, partition_for
from pykfk.group.storage import OFFSETS_TOPIC_CONFIG, LogOffsetsLog, MemoryOffsetsLog, OffsetsLog

__all__ = [
    "OFFSETS_TOPIC",
    "OFFSETS_TOPIC_CONFIG",
    "GroupConfig",
    "GroupCoordinator",
    "LogOffsetsLog",
    "MemoryOffsetsLog",
    "OffsetsLog",
    "partition_for",
]
