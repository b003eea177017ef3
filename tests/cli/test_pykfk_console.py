"""``pykfk produce`` and ``pykfk consume``: keys, values, headers and encodings round
trip, start positions (offset, -N, time), stop conditions, and interplay with
confluent-kafka."""

from __future__ import annotations

import base64
import json

from confluent_kafka import Consumer, Producer, TopicPartition

from pykfk.testing import BrokerProcess

from .conftest import Pykfk


def test_text_lines_with_keys_and_headers_round_trip(pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "3")
    lines = "".join(f"user-{i % 4}:event {i}\n" for i in range(12))
    produced = pykfk.ok("produce", topic_name, "-K", ":", "-H", "source=cli", "-H", "v=1",
                        "-o", "json", input=lines).json()
    assert produced["records"] == 12
    assert sum(p["records"] for p in produced["partitions"]) == 12

    records = pykfk.ok("consume", topic_name, "--from-beginning", "--exit-at-end",
                       "-o", "json").json_lines()
    assert sorted((r["key"], r["value"]) for r in records) == \
        sorted((f"user-{i % 4}", f"event {i}") for i in range(12))
    assert all(r["headers"] == [["source", "cli"], ["v", "1"]] for r in records)
    # One key always lands on one partition, in order.
    by_key: dict[str, set[int]] = {}
    for r in records:
        by_key.setdefault(r["key"], set()).add(r["partition"])
    assert all(len(parts) == 1 for parts in by_key.values())

    text = pykfk.ok("consume", topic_name, "--from-beginning", "-e", "--print-key",
                    "--key-separator", "=").out.splitlines()
    assert sorted(text) == sorted(f"user-{i % 4}=event {i}" for i in range(12))


def test_json_lines_binary_values_and_start_positions(pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    payloads = [bytes([i, 0, 255, i]) for i in range(10)]
    lines = "".join(json.dumps({"key": f"k{i}", "value": base64.b64encode(v).decode(),
                                "timestamp": 1_600_000_000_000 + i * 60_000,
                                "headers": {"i": str(i)}}) + "\n"
                    for i, v in enumerate(payloads))
    pykfk.ok("produce", topic_name, "--input-format", "json", "--value-encoding", "base64",
             input=lines)

    records = pykfk.ok("consume", topic_name, "--offset", "earliest", "-e", "-o", "json",
                       "--value-encoding", "hex").json_lines()
    assert [bytes.fromhex(r["value"]) for r in records] == payloads
    assert [r["offset"] for r in records] == list(range(10))
    assert [r["timestamp"] for r in records] == [1_600_000_000_000 + i * 60_000 for i in range(10)]

    last_two = pykfk.ok("consume", topic_name, "--offset", "-2", "-e", "-o", "json").json_lines()
    assert [r["offset"] for r in last_two] == [8, 9]
    from_offset = pykfk.ok("consume", topic_name, "--offset", "7", "-e", "-o", "json").json_lines()
    assert [r["offset"] for r in from_offset] == [7, 8, 9]
    # 1_600_000_000_000 ms is 2020-09-13T12:26:40Z; record 3 is three minutes later.
    from_time = pykfk.ok("consume", topic_name, "--from-time", "2020-09-13T12:29:40Z", "-e",
                         "-o", "json").json_lines()
    assert [r["offset"] for r in from_time] == [3, 4, 5, 6, 7, 8, 9]
    limited = pykfk.ok("consume", topic_name, "--from-beginning", "-n", "4", "-o", "json")
    assert [r["offset"] for r in limited.json_lines()] == [0, 1, 2, 3]
    assert "consumed 4 records" in limited.err

    bad = pykfk("produce", topic_name, "--input-format", "json", input="{not json\n")
    assert bad.code == 1 and "line 1 is not JSON" in bad.err
    bad = pykfk("produce", topic_name, "--value-encoding", "base64", input="***\n")
    assert bad.code == 1 and "not valid base64" in bad.err
    bad = pykfk("consume", topic_name, "--offset", "soon")
    assert bad.code == 2 and "--offset" in bad.err


def test_works_with_confluent_kafka_both_ways(pykfk: Pykfk, broker: BrokerProcess,
                                             topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "2")
    # murmur2_random is the Java client's partitioner, which the CLI follows.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    for i in range(6):
        producer.produce(topic_name, key=b"k", value=f"from-librdkafka-{i}".encode(),
                         headers=[("h", b"x")])
    assert producer.flush(30) == 0
    records = pykfk.ok("consume", topic_name, "--from-beginning", "-e", "-o", "json").json_lines()
    assert [r["value"] for r in records] == [f"from-librdkafka-{i}" for i in range(6)]
    assert records[0]["headers"] == [["h", "x"]]
    pykfk.ok("produce", topic_name, "-K", "\t", input="k\tfrom-cli\n")

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic_name})
    try:
        partition = records[0]["partition"]
        consumer.assign([TopicPartition(topic_name, partition, 6)])
        message = None
        for _ in range(50):
            message = consumer.poll(0.2)
            if message is not None and not message.error():
                break
        assert message is not None and message.value() == b"from-cli"
        assert message.key() == b"k"
    finally:
        consumer.close()


def test_idle_timeout_stops_an_empty_consume(pykfk: Pykfk, topic_name: str) -> None:
    pykfk.ok("topic", "create", topic_name, "-p", "1")
    result = pykfk.ok("consume", topic_name, "--idle-timeout", "0.5")
    assert result.out == "" and "consumed 0 records" in result.err
