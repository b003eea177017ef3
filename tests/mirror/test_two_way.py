"""Two mirrors in opposite directions between two standalone brokers: remote names keep
records from going round in circles, and so does the origin header with identity names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from pykfk.mirror.naming import ORIGIN_HEADER
from pykfk.testing import wait_until
from tests.mirror.helpers import (
    MirrorProcess,
    PacedWriter,
    create_topic,
    read_partition,
    total_records,
    write_config,
)


def _topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def _reports(mirror: MirrorProcess) -> int:
    return mirror.log.read_text(errors="replace").count(" MB/s, lag ") if mirror.log.exists() else 0


def _two_more_rounds(*mirrors: MirrorProcess) -> None:
    """Each mirror reported (and so refreshed its topics, at the same 1 s period) a few
    more times: anything it was going to copy in a loop would have started."""
    marks = [_reports(m) for m in mirrors]
    for mirror, mark in zip(mirrors, marks):
        wait_until(lambda m=mirror, k=mark: _reports(m) >= k + 3, 30, "three more progress lines")


def _run_both(tmp_path: Path, a: str, b: str, **settings: Any) -> list[MirrorProcess]:
    ab = write_config(tmp_path / "a-b.yaml", ("a", a), ("b", b), **settings)
    ba = write_config(tmp_path / "b-a.yaml", ("b", b), ("a", a), **settings)
    return [MirrorProcess(ab, "a-b").start(), MirrorProcess(ba, "b-a").start()]


@pytest.mark.timeout(180)
def test_default_names_never_copy_a_topic_back(standalone_factory: Any, tmp_path: Path) -> None:
    a, b = standalone_factory("a").bootstrap, standalone_factory("b").bootstrap
    create_topic(a, "orders", 2)
    create_topic(b, "billing", 2)
    PacedWriter(a, "orders", 200, 2).run()
    PacedWriter(b, "billing", 200, 2).run()
    mirrors = _run_both(tmp_path, a, b, topics_regex=".*")
    try:
        wait_until(lambda: total_records(b, "a.orders", 2) == 200, 60, "a.orders in b")
        wait_until(lambda: total_records(a, "b.billing", 2) == 200, 60, "b.billing in a")
        _two_more_rounds(*mirrors)
        assert "b.a.orders" not in _topics(a) and "a.b.billing" not in _topics(b)
        assert total_records(b, "a.orders", 2) == 200 and total_records(a, "b.billing", 2) == 200
    finally:
        for mirror in mirrors:
            assert mirror.stop() == 0, mirror.tail()


@pytest.mark.timeout(180)
def test_identity_names_stop_cycles_with_the_origin_header(standalone_factory: Any, tmp_path: Path) -> None:
    a, b = standalone_factory("a").bootstrap, standalone_factory("b").bootstrap
    for broker in (a, b):
        create_topic(broker, "shared", 1)
    PacedWriter(a, "shared", 100, 1, name="from-a").run()
    PacedWriter(b, "shared", 100, 1, name="from-b").run()
    mirrors = _run_both(tmp_path, a, b, topics="shared", replication_policy="identity")
    try:
        for broker in (a, b):
            wait_until(lambda x=broker: total_records(x, "shared", 1) == 200, 60, "both halves everywhere")
        _two_more_rounds(*mirrors)
        for broker, other in ((a, "b"), (b, "a")):
            records = read_partition(broker, "shared", 0)
            assert len(records) == 200
            copied = [r for r in records if (ORIGIN_HEADER, other.encode()) in r.headers]
            assert len(copied) == 100
            assert all(r.value.startswith(f"from-{other}:".encode()) for r in copied)
    finally:
        for mirror in mirrors:
            assert mirror.stop() == 0, mirror.tail()
