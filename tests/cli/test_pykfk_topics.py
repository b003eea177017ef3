"""``pykfk topic``, ``pykfk cluster`` and the failure paths (bad arguments, unknown
topics, no broker) against a real broker process."""

from __future__ import annotations

import socket
import threading

from pykfk.testing import free_port

from .conftest import Pykfk


def test_unreachable_broker_is_exit_3_with_a_message() -> None:
    pykfk = Pykfk(f"127.0.0.1:{free_port()}")
    result = pykfk("topic", "list", "--timeout", "2")
    assert result.code == 3, result
    assert "cannot reach the cluster" in result.err
    assert "Connection refused" in result.err
    result = pykfk("-o", "json", "cluster", "info", "--timeout", "2")
    assert result.code == 3, result
    assert result.out == ""


def test_a_port_that_is_not_kafka_is_named() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(30)

        def answer_like_http() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer_like_http, daemon=True)
        thread.start()
        result = Pykfk(f"127.0.0.1:{server.getsockname()[1]}")("topic", "list", "--timeout", "5")
        thread.join(10)
    assert result.code == 3, result
    assert "does not answer like a Kafka broker" in result.err


def test_bad_arguments_are_exit_2(pykfk: Pykfk, topic_name: str) -> None:
    result = pykfk("topic", "create")
    assert result.code == 2 and "Missing argument 'NAME'" in result.err, result
    result = pykfk("topic", "create", topic_name, "--partitions", "0")
    assert result.code == 2 and "--partitions" in result.err, result
    result = pykfk("topic", "create", topic_name, "--config", "retention.ms")
    assert result.code == 2 and "is not key=value" in result.err, result
    result = pykfk("group", "reset-offsets", "g", "--all-topics")
    assert result.code == 2 and "exactly one of --to-earliest" in result.err, result
    result = pykfk("no-such-command")
    assert result.code == 2 and "No such command" in result.err, result
    result = pykfk("topic", "list", "--format", "yaml")
    assert result.code == 2, result


def test_unknown_topic_is_exit_1_naming_it(pykfk: Pykfk) -> None:
    for args in (["topic", "describe", "missing-topic"],
                 ["topic", "alter-config", "missing-topic", "--set", "retention.ms=1000"],
                 ["topic", "trim", "missing-topic", "--offset", "1"],
                 ["consume", "missing-topic", "-n", "1"],
                 ["produce", "missing-topic"]):
        result = pykfk(*args, input="x\n")
        assert result.code == 1, (args, result)
        assert "'missing-topic'" in result.err and "UNKNOWN_TOPIC_OR_PARTITION" in result.err, result
    # The lookup must not have created it (no auto-creation from the tool).
    assert "missing-topic" not in pykfk.ok("topic", "list").out


def test_topic_lifecycle(pykfk: Pykfk, topic_name: str) -> None:
    created = pykfk.ok("topic", "create", topic_name, "-p", "2", "-c", "retention.ms=3600000")
    assert f"topic {topic_name} created" in created.out
    again = pykfk("topic", "create", topic_name, "-p", "2")
    assert again.code == 1 and "TOPIC_ALREADY_EXISTS" in again.err
    pykfk.ok("topic", "create", topic_name, "--if-not-exists")

    listed = {t["topic"]: t for t in pykfk.ok("topic", "list", "-o", "json").json()}
    assert listed[topic_name]["partitions"] == 2
    assert listed[topic_name]["replication_factor"] == 1

    described = pykfk.ok("topic", "describe", topic_name, "-o", "json").json()
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    assert all(p["leader"] == p["replicas"][0] == p["isr"][0] for p in described["partitions"])
    configs = {c["name"]: c for c in described["configs"]}
    assert configs["retention.ms"]["value"] == "3600000"
    assert configs["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"

    pykfk.ok("topic", "alter-config", topic_name, "--set", "retention.ms=7200000",
             "--set", "cleanup.policy=compact")
    bad = pykfk("topic", "alter-config", topic_name, "--set", "retention.ms=soon")
    assert bad.code == 1 and "INVALID_CONFIG" in bad.err and "retention.ms" in bad.err, bad
    unknown = pykfk("topic", "alter-config", topic_name, "--set", "no.such.config=1")
    assert unknown.code == 1 and "INVALID_CONFIG" in unknown.err, unknown
    configs = {c["name"]: c["value"] for c in
               pykfk.ok("topic", "describe", topic_name, "-o", "json").json()["configs"]}
    assert configs["retention.ms"] == "7200000"  # the refused changes changed nothing
    assert configs["cleanup.policy"] == "compact"
    pykfk.ok("topic", "alter-config", topic_name, "--delete", "cleanup.policy")
    configs = {c["name"] for c in
               pykfk.ok("topic", "describe", topic_name, "-o", "json").json()["configs"]}
    assert "cleanup.policy" not in configs

    grown = pykfk.ok("topic", "add-partitions", topic_name, "--count", "3", "-o", "json").json()
    assert grown == {"topic": topic_name, "partitions_before": 2, "partitions": 3,
                     "validate_only": False}
    shrink = pykfk("topic", "add-partitions", topic_name, "--count", "2")
    assert shrink.code == 1 and "has 3 partitions already" in shrink.err

    deleted = pykfk.ok("topic", "delete", topic_name, "-o", "json").json()
    assert deleted == [{"topic": topic_name, "deleted": True, "error": None}]
    assert topic_name not in pykfk.ok("topic", "list").out
    missing = pykfk("topic", "delete", topic_name)
    assert missing.code == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in missing.err
    pykfk.ok("topic", "delete", topic_name, "--if-exists")


def test_trim_moves_the_log_start_offset(pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    lines = "".join(f"record-{i}\n" for i in range(10))
    produced = pykfk.ok("produce", topic_name, "-o", "json", input=lines).json()
    assert produced["records"] == 10
    trimmed = pykfk.ok("topic", "trim", topic_name, "--offset", "4", "-o", "json").json()
    assert trimmed == [{"topic": topic_name, "partition": 0, "log_start_offset": 4}]
    described = pykfk.ok("topic", "describe", topic_name, "-o", "json").json()
    assert described["partitions"][0]["log_start_offset"] == 4
    assert described["partitions"][0]["high_watermark"] == 10
    values = [r["value"] for r in pykfk.ok("consume", topic_name, "--from-beginning", "-e",
                                           "-o", "json").json_lines()]
    assert values == [f"record-{i}" for i in range(4, 10)]
    beyond = pykfk("topic", "trim", topic_name, "--offset", "11")
    assert beyond.code == 1 and "OFFSET_OUT_OF_RANGE" in beyond.err, beyond
    pykfk.ok("topic", "trim", topic_name, "--offset", "latest")
    described = pykfk.ok("topic", "describe", topic_name, "-o", "json").json()
    assert described["partitions"][0]["log_start_offset"] == 10


def test_cluster_info_and_configs(pykfk: Pykfk, broker: object, topic_name: str) -> None:
    info = pykfk.ok("cluster", "info", "-o", "json").json()
    assert info["cluster_id"]
    [only] = info["brokers"]
    assert only["port"] == broker.port  # type: ignore[attr-defined]
    assert only["controller"] and info["controller_id"] == only["node_id"]
    table = pykfk.ok("cluster", "info").out
    assert info["cluster_id"] in table and "CONTROLLER" in table

    versions = {v["name"]: v for v in pykfk.ok("cluster", "api-versions", "-o", "json").json()}
    assert versions["Metadata"]["max_version"] >= 1

    broker_configs = pykfk.ok("cluster", "config", "get", "--all", "-o", "json").json()
    assert broker_configs["resource_type"] == "broker"
    names = {c["name"] for c in broker_configs["configs"]}
    assert "log.retention.hours" in names

    pykfk.ok("topic", "create", topic_name, "-p", "1")
    pykfk.ok("cluster", "config", "set", "--topic", topic_name, "max.message.bytes=65536")
    got = pykfk.ok("cluster", "config", "get", "--topic", topic_name, "max.message.bytes",
                   "-o", "json").json()
    assert [(c["name"], c["value"]) for c in got["configs"]] == [("max.message.bytes", "65536")]
    clash = pykfk("cluster", "config", "get", "--topic", topic_name, "--broker", "0")
    assert clash.code == 2


def test_broker_configs_change_without_restart(pykfk: Pykfk) -> None:
    node = str(pykfk.ok("cluster", "info", "-o", "json").json()["controller_id"])
    pykfk.ok("cluster", "config", "set", "--broker", node, "log.retention.ms=86400000")
    got = pykfk.ok("cluster", "config", "get", "--broker", node, "log.retention.ms",
                   "-o", "json").json()["configs"]
    assert [(c["value"], c["source"]) for c in got] == [("86400000", "DYNAMIC_BROKER_CONFIG")]
    pykfk.ok("cluster", "config", "set", "--broker-defaults", "log.cleaner.threads=2")
    defaults = pykfk.ok("cluster", "config", "get", "--broker-defaults", "-o", "json").json()
    assert ("log.cleaner.threads", "2") in [(c["name"], c["value"]) for c in defaults["configs"]]
    bad = pykfk("cluster", "config", "set", "--broker", node, "no.such.setting=1")
    assert bad.code == 1 and "no.such.setting" in bad.err, bad
    pykfk.ok("cluster", "config", "set", "--broker", node, "--delete", "log.retention.ms")
    sources = {c["name"]: c["source"] for c in pykfk.ok(
        "cluster", "config", "get", "--broker", node, "--all", "-o", "json").json()["configs"]}
    assert sources["log.retention.ms"] != "DYNAMIC_BROKER_CONFIG"
