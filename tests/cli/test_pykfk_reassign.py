"""``pykfk reassign``: plans in Kafka's reassignment JSON, and refusals of bad input."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import Pykfk


def test_plan_is_kafka_reassignment_json(pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "3")
    result = pykfk.ok("reassign", "plan", "--topic", topic_name, "--brokers", "0")
    plan = json.loads(result.out)
    assert plan == {"version": 1, "partitions": [
        {"topic": topic_name, "partition": p, "replicas": [0]} for p in range(3)]}
    # The current assignment, to roll back with, goes to stderr.
    assert "current assignment" in result.err and topic_name in result.err

    unknown = pykfk("reassign", "plan", "--topic", topic_name, "--brokers", "0,7")
    assert unknown.code == 1 and "broker 7 is not in the cluster" in unknown.err
    too_many = pykfk("reassign", "plan", "--topic", topic_name, "--brokers", "0",
                     "--replication-factor", "2")
    assert too_many.code == 1 and "needs 2 replicas" in too_many.err
    bad = pykfk("reassign", "plan", "--topic", topic_name, "--brokers", "zero")
    assert bad.code == 2 and "--brokers" in bad.err


def test_execute_refuses_a_file_that_is_not_a_plan(pykfk: Pykfk, tmp_path: Path) -> None:
    junk = tmp_path / "plan.json"
    junk.write_text('{"partitions": [{"topic": "t"}]}')
    result = pykfk("reassign", "execute", str(junk))
    assert result.code == 2 and "is not a reassignment plan" in result.err
    missing = pykfk("reassign", "verify", str(tmp_path / "absent.json"))
    assert missing.code == 2 and "cannot read" in missing.err
