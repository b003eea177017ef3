"""What the mirror tests share: mirror processes, configurations, records written with
confluent-kafka and read back per partition."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.testing import wait_until  # noqa: F401 - tests/pipeline imports it from here

ROOT = Path(__file__).resolve().parents[2]

# ``python -m pykfk.mirror`` where making a confluent-kafka AdminClient ends the process:
# the mirror's admin work (topics, settings, group offsets) goes through pykfk's own
# admin client, and every end-to-end test of the mirror fails if it went back to that one.
_MIRROR_MAIN = """
import os, runpy, sys
import confluent_kafka.admin

class Refused:
    def __init__(self, *args, **kwargs):
        sys.stderr.write("confluent_kafka.admin.AdminClient made by the mirror\\n")
        sys.stderr.flush()
        os._exit(70)

confluent_kafka.admin.AdminClient = Refused
runpy.run_module("pykfk.mirror", run_name="__main__")
"""


def mirror_command(*args: str) -> list[str]:
    """The argv of ``pykfk-mirror ARGS...`` run as a user runs it (see _MIRROR_MAIN)."""
    return [sys.executable, "-c", _MIRROR_MAIN, *args]


def write_config(path: Path, source: tuple[str, str], target: tuple[str, str], **settings: Any) -> Path:
    """A YAML mirror configuration: ``source``/``target`` are (alias, bootstrap)."""
    doc: dict[str, Any] = {
        "source": {"alias": source[0], "bootstrap.servers": source[1]},
        "target": {"alias": target[0], "bootstrap.servers": target[1]},
        "report.interval.ms": 1000,
        "refresh.topics.interval.ms": 1000,
        "emit.checkpoints.interval.ms": 1000,
        # librdkafka's lowest useful values, so a dead member leaves the group quickly
        "source.consumer.session.timeout.ms": 6000,
        "source.consumer.heartbeat.interval.ms": 500,
        "source.topic.metadata.refresh.interval.ms": 1000,
    }
    doc.update({k.replace("_", "."): v for k, v in settings.items()})
    path.write_text(yaml.safe_dump(doc))
    return path


class MirrorProcess:
    """``python -m pykfk.mirror run CONFIG`` as a child process, output in a log file."""

    def __init__(self, config: Path, name: str = "mirror", *extra: str):
        self.config = config
        self.log = config.parent / f"{name}.log"
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> MirrorProcess:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                mirror_command("run", str(self.config), *self.extra),
                stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            )
        self.starts += 1
        return self

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 60) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return -1 if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"mirror did not stop on SIGTERM:\n{self.tail()}") from None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(line for line in text.splitlines() if "rdkafka#" not in line)[-6000:]

    def assigned_times(self) -> int:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text.count("assigned ")


def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1, **configs: Any) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(name, partitions, replication, config={k.replace("_", "."): str(v) for k, v in configs.items()})
    admin.create_topics([new])[name].result(30)


def topic_partitions(bootstrap: str, name: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(name, timeout=10).topics.get(name)
    return 0 if topic is None or topic.error is not None else len(topic.partitions)


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-ends"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
    finally:
        consumer.close()


def offsets_used(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of the end offsets: the records, plus the transaction markers of a target
    written with exactly.once (an upper bound of the records, cheap to ask for)."""
    try:
        return sum(end_offsets(bootstrap, topic, partitions))
    except Exception:  # noqa: BLE001 - the topic may not exist yet
        return 0


@dataclass(frozen=True)
class Record:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def read_partition(bootstrap: str, topic: str, partition: int, start: int = 0,
                   timeout: float = 60) -> list[Record]:
    """Every record of one partition from ``start`` to its current end, as a
    read_committed consumer sees them (aborted records and markers left out)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.auto.commit": False, "fetch.max.bytes": 8 << 20,
                         "isolation.level": "read_committed"})
    try:
        # The committed end (the last stable offset): the position reaches it, also
        # when the partition ends with a transaction marker.
        _, end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[Record] = []
        deadline = time.monotonic() + timeout
        position = start
        while position < end:
            assert time.monotonic() < deadline, f"reading {topic}[{partition}] took over {timeout} s"
            for m in consumer.consume(5000, 0.5):
                if m.error() is None:
                    out.append(Record(m.offset(), m.key(), m.value(), tuple(m.headers() or ()),
                                      m.timestamp()[1]))
            position = max(position, consumer.position([TopicPartition(topic, partition)])[0].offset)
        return out
    finally:
        consumer.close()


def total_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_committed consumer reads from the topic (0 while it does not exist)."""
    if topic_partitions(bootstrap, topic) < partitions:
        return 0
    return sum(len(read_partition(bootstrap, topic, p)) for p in range(partitions))


def last_value(bootstrap: str, topic: str, partition: int) -> bytes | None:
    """The value of the partition's last committed record (None when it has none)."""
    end = end_offsets(bootstrap, topic, partition + 1)[partition]
    # Markers follow the records: a few back is enough (one per transaction since).
    records = read_partition(bootstrap, topic, partition, start=max(0, end - 1000))
    return records[-1].value if records else None


class PacedWriter(threading.Thread):
    """Writes ``count`` keyed records with headers over ``partitions`` partitions (record
    i to partition i % partitions) at about ``rate`` records/s, with confluent-kafka."""

    def __init__(self, bootstrap: str, topic: str, count: int, partitions: int, *,
                 name: str = "w", rate: float = 0.0, first: int = 0):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.count, self.partitions = bootstrap, topic, count, partitions
        self.name_tag, self.rate, self.first = name, rate, first
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                                 "linger.ms": 5})
            began = time.monotonic()
            for i in range(self.first, self.first + self.count):
                key = f"{self.name_tag}-{i}".encode()
                value = f"{self.name_tag}:{i}:".encode() + b"x" * 80
                while True:
                    try:
                        producer.produce(self.topic, value, key, i % self.partitions,
                                         headers=[("writer", self.name_tag.encode()), ("seq", str(i).encode())])
                        break
                    except BufferError:
                        producer.poll(0.05)
                self.written += 1
                if self.rate and self.written % 1000 == 0:
                    ahead = self.written / self.rate - (time.monotonic() - began)
                    if ahead > 0:
                        time.sleep(ahead)  # pacing the writes, not waiting for anything
                    producer.poll(0)
            assert producer.flush(60) == 0
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


@dataclass
class CopyCheck:
    duplicates: int
    replays: int  # times the target went back to an earlier source record


def check_copy(source: list[Record], target: list[Record], *, origin_header: bool = False) -> CopyCheck:
    """The target partition holds every source record, fields unchanged, in the source's
    order; an at-least-once copy may go back and repeat a stretch (a resumed copy), never
    skip ahead."""
    by_value = {r.value: r for r in source}
    assert len(by_value) == len(source), "source values must be unique for this check"
    previous = -1
    replays = 0
    for record in target:
        original = by_value.get(record.value)
        assert original is not None, f"target record {record.offset} is not in the source"
        headers = record.headers[:-1] if origin_header else record.headers
        assert (record.key, headers, record.timestamp) == (original.key, original.headers, original.timestamp)
        index = original.offset - source[0].offset
        if index != previous + 1:
            assert index <= previous, f"gap: source record {previous + 1} missing before {index}"
            replays += 1
        previous = index
    assert previous == len(source) - 1 or not source, f"only {previous + 1} of {len(source)} records copied"
    # Every source record appears: no gap and ending at the last one covers them all.
    return CopyCheck(len(target) - len(source), replays)
