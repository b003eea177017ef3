"""``pykfk reassign``: plans in Kafka's reassignment JSON, and refusals of bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .conftest import Pykfk, on_terminal

THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


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


def test_execute_and_verify_move_a_partition_in_a_cluster(tmp_path: Path, zookeeper_server) -> None:
    from tests.cluster.conftest import Cluster

    cluster = Cluster(str(tmp_path), zookeeper_server, 2, {}).start()
    try:
        cli = Pykfk(cluster.bootstrap)
        cli.ok("topic", "create", "moving", "-p", "1", "-r", "1")
        cli.ok("produce", "moving", input="a\nb\nc\n")
        [before] = _replicas(cli, "moving")
        target = 1 - before
        plan = tmp_path / "plan.json"
        plan.write_text(cli.ok("reassign", "plan", "--topic", "moving", "--brokers", str(target)).out)
        # kafka-reassign-partitions.sh --throttle: the rate goes on both brokers of the
        # move, and verify takes it away once the move is complete.
        started = cli.ok("reassign", "execute", str(plan), "--throttle", "50000000")
        assert "throttle 50000000 B/s set on brokers 0,1" in started.err
        for broker in (0, 1):
            rates = cli.ok("cluster", "config", "get", "--broker", str(broker), "-o", "json",
                           *THROTTLE_RATES).json()["configs"]
            assert {(c["name"], c["value"], c["source"]) for c in rates} == {
                (name, "50000000", "DYNAMIC_BROKER_CONFIG") for name in THROTTLE_RATES}
        verified = cli("reassign", "verify", str(plan), "--wait", "30s", "-o", "json")
        assert verified.code == 0, verified
        assert verified.json()["complete"] and verified.json()["throttle_removed_from"] == [0, 1]
        assert verified.json()["partitions"][0]["status"] == "complete"
        assert _replicas(cli, "moving") == [target]
        for broker in (0, 1):
            rates = cli.ok("cluster", "config", "get", "--broker", str(broker),
                           *THROTTLE_RATES, "-o", "json").json()["configs"]
            assert {c["source"] for c in rates} == {"DEFAULT_CONFIG"}, rates
        again = on_terminal(cli, "reassign", "verify", str(plan), "--wait", "30s")
        assert again.code == 0, again
        assert re.search(r"moving\s+0\s+\d\s+\d\s+complete", again.out), again
        assert re.search(r"reassigning\s+\[#+\]\s+100%", again.err), again
        consumed = cli.ok("consume", "moving", "--from-beginning", "-n", "3").out.split()
        assert consumed == ["a", "b", "c"]
    finally:
        cluster.close()


def _replicas(cli: Pykfk, topic: str) -> list[int]:
    described = cli.ok("-o", "json", "topic", "describe", topic).json()
    return _find_replicas(described)


def _find_replicas(value: object) -> list[int]:
    """The replicas list of the (only) partition, wherever the JSON nests it."""
    if isinstance(value, dict):
        if "replicas" in value:
            return list(value["replicas"])
        for inner in value.values():
            found = _find_replicas(inner)
            if found:
                return found
    if isinstance(value, list):
        for inner in value:
            found = _find_replicas(inner)
            if found:
                return found
    return []
