"""A running mirror between two standalone brokers: its Prometheus endpoint
(metrics.listener) counts what it copied, and a setting changed on a source topic it
already copies reaches the remote topic."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin._resource import ResourceType
from prometheus_client.parser import text_string_to_metric_families

from pykfk.client.admin import AdminClient as PykfkAdmin
from pykfk.mirror.topics import describe_topic_configs
from pykfk.testing import wait_until
from tests.mirror.helpers import (
    MirrorProcess,
    PacedWriter,
    create_topic,
    topic_partitions,
    total_records,
    write_config,
)

RECORDS = 3000


def _metrics_url(mirror: MirrorProcess) -> str | None:
    found = re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)", mirror.log.read_text(errors="replace"))
    return found.group(1) if found else None


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape(url: str) -> Samples:
    """(name, labels) -> value of every sample the endpoint serves."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def _value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"source": "a", "target": "b", **labels}.items())))


@pytest.mark.timeout(120)
def test_metrics_endpoint_counts_the_copy(standalone_factory: Any, tmp_path: Path) -> None:
    source, target = standalone_factory("a").bootstrap, standalone_factory("b").bootstrap
    create_topic(source, "clicks", 3)
    PacedWriter(source, "clicks", RECORDS, 3).run()
    config = write_config(tmp_path / "a-b.yaml", ("a", source), ("b", target), topics="clicks",
                          metrics_listener="http://127.0.0.1:0")
    mirror = MirrorProcess(config).start()
    try:
        wait_until(lambda: total_records(target, "a.clicks", 3) == RECORDS, 60, "the copy")
        url = wait_until(lambda: _metrics_url(mirror), 30, "the metrics address in the log")
        topic = {"topic": "clicks", "remote_topic": "a.clicks"}

        def counted() -> Samples | None:
            samples = _scrape(url)
            return samples if _value(samples, "pykfk_mirror_records_total", **topic) == RECORDS else None

        samples = wait_until(counted, 30, "the count of records copied")
        record_bytes = sum(len(f"w-{i}") + len(f"w:{i}:") + 80 for i in range(RECORDS))
        assert _value(samples, "pykfk_mirror_bytes_total", **topic) == record_bytes
        assert _value(samples, "pykfk_mirror_partitions") == 3
        assert _value(samples, "pykfk_mirror_exactly_once") == 1
        assert (_value(samples, "pykfk_mirror_transactions_total") or 0) >= 3  # one per partition at least
        assert _value(samples, "pykfk_mirror_records_per_second") is not None
        assert ("process_cpu_seconds_total", frozenset()) in samples
        # Lag per partition (from the latest fetch's high watermark): zero once caught up.
        for partition in range(3):
            wait_until(lambda p=str(partition): _value(_scrape(url), "pykfk_mirror_lag_records",
                                                       topic="clicks", partition=p) == 0, 30, "lag 0")
    finally:
        assert mirror.stop() == 0, mirror.tail()


def _set_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([change])[change].result(30)


@pytest.mark.timeout(120)
def test_a_setting_changed_in_the_source_reaches_the_remote_topic(standalone_factory: Any,
                                                                   tmp_path: Path) -> None:
    source, target = standalone_factory("a").bootstrap, standalone_factory("b").bootstrap
    create_topic(source, "orders", 2, retention_ms=86400000)
    config = write_config(tmp_path / "a-b.yaml", ("a", source), ("b", target), topics="orders")
    mirror = MirrorProcess(config).start()
    target_admin = PykfkAdmin(target)
    try:
        wait_until(lambda: topic_partitions(target, "a.orders") == 2, 60, "a.orders created")
        assert describe_topic_configs(target_admin, "a.orders")["retention.ms"] == "86400000"
        _set_config(source, "orders", "retention.ms", "3600000")
        _set_config(source, "orders", "cleanup.policy", "compact")
        # refresh.topics.interval.ms is 1 s in these tests
        wait_until(lambda: describe_topic_configs(target_admin, "a.orders").get("retention.ms") == "3600000",
                   30, "the new retention.ms in a.orders")
        wait_until(lambda: describe_topic_configs(target_admin, "a.orders").get("cleanup.policy") == "compact",
                   30, "the new cleanup.policy in a.orders")
    finally:
        target_admin.close()
        assert mirror.stop() == 0, mirror.tail()
