"""kcat (Debian's, built on librdkafka 2.0.2, the oldest client the broker must serve)
produces to, lists and consumes from a pykfk-broker process."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

KCAT = shutil.which("kcat") or "kcat"
RECORDS = 300


def kcat(broker, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        [KCAT, "-b", broker.bootstrap, *args], input=stdin, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_list_consume(shared_broker, topic_name, codec):
    lines = [f"key-{i % 7}:value-{i}" for i in range(RECORDS)]
    # -p 0: explicit partition on an auto-created topic (librdkafka 2.0.2 needs the topic
    # ready in the same Metadata answer); -K: splits key and value.
    kcat(shared_broker, "-P", "-t", topic_name, "-p", "0", "-K", ":", "-z", codec,
         "-X", "topic.request.required.acks=-1", stdin="\n".join(lines) + "\n")

    listing = json.loads(kcat(shared_broker, "-L", "-J", "-t", topic_name))
    (topic,) = [t for t in listing["topics"] if t["topic"] == topic_name]
    assert [p["partition"] for p in topic["partitions"]] == [0]
    assert topic["partitions"][0]["leader"] == listing["brokers"][0]["id"]

    out = kcat(shared_broker, "-C", "-t", topic_name, "-o", "beginning", "-e", "-J")
    consumed = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert [(m["key"], m["payload"]) for m in consumed] == [tuple(x.split(":")) for x in lines]
    assert [m["offset"] for m in consumed] == list(range(RECORDS))


def test_offsets_by_timestamp(shared_broker, topic_name):
    kcat(shared_broker, "-P", "-t", topic_name, "-p", "0", stdin="first\n")
    time.sleep(0.05)  # distinct wall-clock milliseconds before and after ``middle``
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    kcat(shared_broker, "-P", "-t", topic_name, "-p", "0", stdin="second\nthird\n")
    # -Q -t topic:partition:timestamp answers the first offset at or after the time.
    out = kcat(shared_broker, "-Q", "-t", f"{topic_name}:0:{middle}")
    assert f"{topic_name} [0] offset 1" in out
