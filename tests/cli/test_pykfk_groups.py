"""``pykfk group`` against a real consumer group made by confluent-kafka: lag is the
end offset minus the committed offset, and reset-offsets moves the group."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pykfk.testing import BrokerProcess

from .conftest import Pykfk

PARTITIONS = 3
PER_PARTITION = 20


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        for i in range(PER_PARTITION):
            producer.produce(topic, value=f"p{p}-{i}".encode(), partition=p,
                             timestamp=1_700_000_000_000 + i * 1000)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                     "enable.auto.commit": False, "auto.offset.reset": "earliest",
                     "session.timeout.ms": 6000})


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    consumer = _consumer(bootstrap, group)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in found}


@pytest.fixture
def group_topic(pykfk: Pykfk, broker: BrokerProcess, topic_name: str) -> Iterator[str]:
    pykfk.ok("topic", "create", topic_name, "-p", str(PARTITIONS))
    _produce(broker.bootstrap, topic_name)
    yield topic_name


def _wait_for_assignment(consumer: Consumer, partitions: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while len(consumer.assignment()) < partitions:
        assert time.monotonic() < deadline, "no assignment in time"
        consumer.poll(0.2)


def test_describe_shows_members_assignments_and_lag(pykfk: Pykfk, broker: BrokerProcess,
                                                    group_topic: str) -> None:
    group = f"g-{group_topic}"
    consumer = _consumer(broker.bootstrap, group)
    consumer.subscribe([group_topic])
    try:
        _wait_for_assignment(consumer, PARTITIONS)
        committed = {0: 5, 1: 17}  # partition 2 never committed
        consumer.commit(offsets=[TopicPartition(group_topic, p, o) for p, o in committed.items()],
                        asynchronous=False)
        described = pykfk.ok("group", "describe", group, "-o", "json").json()
        assert described["state"] == "Stable"
        [member] = described["members"]
        assert member["assignment"] == {group_topic: [0, 1, 2]}
        rows = {r["partition"]: r for r in described["offsets"] if r["topic"] == group_topic}
        assert sorted(rows) == [0, 1, 2]
        for p, row in rows.items():
            _, high = consumer.get_watermark_offsets(TopicPartition(group_topic, p), 10)
            assert row["end_offset"] == high == PER_PARTITION
            assert row["committed_offset"] == committed.get(p)
            expected_lag = high - committed[p] if p in committed else None
            assert row["lag"] == expected_lag
            assert row["member_id"] == member["member_id"]
        assert described["total_lag"] == (PER_PARTITION - 5) + (PER_PARTITION - 17)

        table = pykfk.ok("group", "describe", group).out
        assert "LAG" in table and member["member_id"] in table
        listed = {g["group"]: g for g in pykfk.ok("group", "list", "-o", "json").json()}
        assert listed[group]["state"] == "Stable" and listed[group]["members"] == 1

        # An active group's offsets are not reset, and say why.
        refused = pykfk("group", "reset-offsets", group, "--all-topics", "--to-earliest",
                        "--execute")
        assert refused.code == 1 and "stop its consumers first" in refused.err
    finally:
        consumer.close()


def test_reset_offsets_moves_a_real_group(pykfk: Pykfk, broker: BrokerProcess,
                                          group_topic: str, tmp_path: Path) -> None:
    group = f"g-{group_topic}"
    consumer = _consumer(broker.bootstrap, group)
    consumer.commit(offsets=[TopicPartition(group_topic, p, 10) for p in range(PARTITIONS)],
                    asynchronous=False)
    consumer.close()
    topic = group_topic

    dry = pykfk.ok("group", "reset-offsets", group, "--topic", topic, "--to-earliest",
                   "-o", "json").json()
    assert dry["executed"] is False
    assert {r["partition"]: (r["current_offset"], r["new_offset"]) for r in dry["offsets"]} == \
        {p: (10, 0) for p in range(PARTITIONS)}
    assert _committed(broker.bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 10)
    text = pykfk.ok("group", "reset-offsets", group, "--topic", topic, "--to-earliest")
    assert "dry run" in text.err

    pykfk.ok("group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert _committed(broker.bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 0)

    pykfk.ok("group", "reset-offsets", group, "--topic", f"{topic}:1", "--shift-by", "7",
             "--execute")
    assert _committed(broker.bootstrap, group, topic) == {0: 0, 1: 7, 2: 0}

    pykfk.ok("group", "reset-offsets", group, "--all-topics", "--shift-by", "-100", "--execute")
    assert _committed(broker.bootstrap, group, topic) == {0: 0, 1: 0, 2: 0}  # clamped

    pykfk.ok("group", "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")
    assert _committed(broker.bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS),
                                                                       PER_PARTITION)

    # Record i of each partition has timestamp 1_700_000_000_000 + i s.
    pykfk.ok("group", "reset-offsets", group, "--topic", topic,
             "--to-datetime", "2023-11-14T22:13:32Z", "--execute")
    assert _committed(broker.bootstrap, group, topic) == dict.fromkeys(range(PARTITIONS), 12)

    plan = tmp_path / "reset.csv"
    plan.write_text(f"{topic},0,3\n{topic},2,9\n")
    result = pykfk.ok("group", "reset-offsets", group, "--from-file", str(plan), "--execute",
                      "-o", "json").json()
    assert result["executed"] is True
    assert _committed(broker.bootstrap, group, topic) == {0: 3, 1: 12, 2: 9}

    # The lag the tool reports follows the new offsets.
    rows = {r["partition"]: r["lag"] for r in
            pykfk.ok("group", "describe", group, "-o", "json").json()["offsets"]}
    assert rows == {0: PER_PARTITION - 3, 1: PER_PARTITION - 12, 2: PER_PARTITION - 9}

    deleted = pykfk.ok("group", "delete", group, "-o", "json").json()
    assert deleted == [{"group": group, "deleted": True, "error": None}]
    assert group not in {g["group"] for g in pykfk.ok("group", "list", "-o", "json").json()}
    missing = pykfk("group", "describe", group)
    assert missing.code == 1 and "does not exist" in missing.err


def test_delete_offsets_of_one_topic(pykfk: Pykfk, broker: BrokerProcess, group_topic: str) -> None:
    group = f"g-{group_topic}"
    consumer = _consumer(broker.bootstrap, group)
    consumer.subscribe([group_topic])
    try:
        _wait_for_assignment(consumer, PARTITIONS)
        consumer.commit(offsets=[TopicPartition(group_topic, p, 4) for p in range(PARTITIONS)],
                        asynchronous=False)
        # A topic the group consumes keeps its offsets (OffsetDelete refuses).
        refused = pykfk("group", "delete-offsets", group, "--topic", group_topic)
        assert refused.code == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in refused.out + refused.err
    finally:
        consumer.close()
    assert _committed(broker.bootstrap, group, group_topic) == dict.fromkeys(range(PARTITIONS), 4)

    result = pykfk.ok("group", "delete-offsets", group, "--topic", f"{group_topic}:0,2",
                      "-o", "json").json()
    assert result == [{"topic": group_topic, "partition": p, "deleted": True, "error": None}
                      for p in (0, 2)]
    left = _committed(broker.bootstrap, group, group_topic)
    assert left[1] == 4 and left[0] < 0 and left[2] < 0
    rows = {r["partition"]: r for r in
            pykfk.ok("group", "describe", group, "-o", "json").json()["offsets"]}
    assert sorted(rows) == [1]


def test_all_groups_reset_and_delete_as_kafka_consumer_groups_does(pykfk: Pykfk, broker: BrokerProcess,
                                                                   group_topic: str) -> None:
    """``--all-groups`` (kafka-consumer-groups.sh's): every idle group is reset, a group
    with members is named and left alone; delete takes every group it may."""
    idle = [f"idle-{i}-{group_topic}" for i in range(2)]
    for n, group in enumerate(idle):
        consumer = _consumer(broker.bootstrap, group)
        consumer.commit(offsets=[TopicPartition(group_topic, p, 10 + n) for p in range(PARTITIONS)],
                        asynchronous=False)
        consumer.close()
    busy = f"busy-{group_topic}"
    member = _consumer(broker.bootstrap, busy)
    member.subscribe([group_topic])
    try:
        _wait_for_assignment(member, PARTITIONS)
        member.commit(offsets=[TopicPartition(group_topic, p, 15) for p in range(PARTITIONS)], asynchronous=False)

        dry = pykfk.ok("group", "reset-offsets", "--all-groups", "--all-topics", "--to-earliest")
        header, *lines = dry.out.splitlines()
        assert header.split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT", "NEW"]
        assert {line.split()[0] for line in lines} >= {*idle, busy}
        assert "dry run" in dry.err

        applied = pykfk("group", "reset-offsets", "--all-groups", "--all-topics", "--to-earliest",
                        "--execute", "-o", "json")
        assert applied.code == 1 and busy in applied.err and "stop its consumers first" in applied.err
        by_group = {r["group"]: r for r in applied.json()}
        assert busy not in by_group
        for group in idle:
            assert by_group[group]["executed"] is True
            assert _committed(broker.bootstrap, group, group_topic) == dict.fromkeys(range(PARTITIONS), 0)
        assert _committed(broker.bootstrap, busy, group_topic) == dict.fromkeys(range(PARTITIONS), 15)

        usage = pykfk("group", "reset-offsets", "--all-topics", "--to-earliest")
        assert usage.code == 2 and "--all-groups" in usage.err

        deleted = pykfk("group", "delete", "--all-groups", "-o", "json")
        assert deleted.code == 1 and busy in deleted.err
        rows = {r["group"]: r for r in deleted.json()}
        assert all(rows[g]["deleted"] for g in idle) and rows[busy]["error"] == "NON_EMPTY_GROUP"
        assert [g["group"] for g in pykfk.ok("group", "list", "-o", "json").json()] == [busy]
    finally:
        member.close()
    assert pykfk.ok("group", "delete", "--all-groups", "-o", "json").json() == [
        {"group": busy, "deleted": True, "error": None}]
    assert pykfk.ok("group", "list", "-o", "json").json() == []
