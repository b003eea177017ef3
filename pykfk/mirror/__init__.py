"""Mirroring between Kafka-protocol clusters (``pykfk-mirror``), MirrorMaker 2 in spirit
(KIP-382): topics, their partitions and settings, record copies, consumer-group offset
translation, progress kept in the target. docs/mirror.md is the manual.

The data path uses confluent-kafka (the ``mirror`` extra); importing this package does
not, so ``pykfk.mirror.config`` and ``pykfk.mirror.naming`` work without it.
"""

from pykfk.mirror.config import ConfigError, MirrorConfig, load_config, parse_config
from pykfk.mirror.naming import ORIGIN_HEADER, ReplicationPolicy

__all__ = ["ORIGIN_HEADER", "ConfigError", "MirrorConfig", "ReplicationPolicy", "load_config", "parse_config"]
