"""LogConfig: Kafka's topic-level names, defaults and validation."""

from __future__ import annotations

import pytest

from pykfk.config import BrokerConfig
from pykfk.log import LogConfig


def test_kafka_defaults():
    c = LogConfig()
    assert c.segment_bytes == 1073741824
    assert c.segment_ms == 604800000
    assert c.retention_ms == 604800000 and c.retention_bytes == -1
    assert c.max_message_bytes == 1048588
    assert c.max_index_bytes == 10485760 and c.index_interval_bytes == 4096
    assert c.file_delete_delay_ms == 60000
    assert c.flush_interval_messages == c.flush_interval_ms == 2**63 - 1
    assert c.deletes_segments and not c.log_append_time


def test_from_properties_parses_strings_and_ignores_other_keys():
    c = LogConfig.from_properties({
        "segment.bytes": "2048", "retention.ms": "-1", "cleanup.policy": "compact,delete",
        "message.timestamp.type": "LogAppendTime", "preallocate": "true",
        "min.insync.replicas": "2", "flush.messages": 10,
    })
    assert (c.segment_bytes, c.retention_ms, c.flush_interval_messages) == (2048, -1, 10)
    assert c.cleanup_policies == ("compact", "delete") and c.deletes_segments
    assert c.log_append_time and c.preallocate
    assert LogConfig.from_properties(c.to_properties()) == c
    base = LogConfig(segment_bytes=4096)
    assert LogConfig.from_properties({"retention.bytes": 5}, base).segment_bytes == 4096


@pytest.mark.parametrize("props", [
    {"segment.bytes": "13"}, {"segment.bytes": "ten"}, {"segment.bytes": 2**31},
    {"retention.ms": "-2"},
    {"message.timestamp.type": "Now"}, {"cleanup.policy": "forever"}, {"flush.messages": 0},
    {"preallocate": "yes"}, {"segment.index.bytes": 3}, {"max.message.bytes": -1},
])
def test_invalid_values_are_refused(props):
    with pytest.raises(ValueError):
        LogConfig.from_properties(props)


def test_compact_only_topics_are_not_deleted_by_retention():
    assert not LogConfig(cleanup_policy="compact").deletes_segments


def test_from_broker_config_topic_defaults():
    broker = BrokerConfig({"log.segment.bytes": "5000", "log.retention.hours": "1",
                           "log.roll.ms": "123", "message.max.bytes": "777"})
    c = LogConfig.from_properties(broker.topic_config({"retention.bytes": "99"}))
    assert (c.segment_bytes, c.retention_ms, c.segment_ms) == (5000, 3_600_000, 123)
    assert (c.max_message_bytes, c.retention_bytes) == (777, 99)
