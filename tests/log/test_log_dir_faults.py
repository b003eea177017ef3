"""Faults of the disks under a broker process: a full file system (a tmpfs of a few MiB
mounted by the test), a free-space floor, and EIO injected into pwrite, fsync and open
with Debian's libfiu (``fiu-run -x`` / ``fiu-ctrl``) for a window.

For each: what was acknowledged is read back byte for byte, writes resume without a
restart, and the broker logs each change of a dir's state once, naming the dir and the
cause, with no traceback. The tests mount file systems, so they run as root.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.errors import ErrorCode, KafkaError
from pykfk.log.config import LogConfig
from pykfk.log.log import Log
from pykfk.testing import BrokerProcess, RawClient, free_port, wait_until

from .helpers import batch, read_records

VALUE_SIZE = 1000


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Any]:
    """``mount(name, size, options)`` -> the path of a tmpfs of ``size`` bytes (more
    mount ``options`` after a comma), unmounted at the end."""
    mounted: list[str] = []

    def mount(name: str, size: int, options: str = "") -> str:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}{options}", "tmpfs", str(path)], check=True)
        mounted.append(str(path))
        return str(path)

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", path], check=False)


def fill(path: str, leave: int) -> str:
    """A ballast file that leaves about ``leave`` bytes free in ``path``'s file system."""
    stats = os.statvfs(path)
    free = stats.f_bavail * stats.f_frsize
    ballast = os.path.join(path, "ballast")
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(free - leave, 0))
    return ballast


def value(tag: str, i: int) -> bytes:
    head = f"{tag}-{i:06d}-".encode()
    return head + bytes((i + k) % 251 for k in range(VALUE_SIZE - len(head)))


def produce(bootstrap: str, topic: str, partition: int, values: list[bytes], **config: Any) -> list[bytes]:
    """Sends ``values`` (idempotent, acks=all) and returns those acknowledged."""
    acked: list[bytes] = []
    errors: set[str] = set()

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.append(msg.value())
        else:
            errors.add(err.name())

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.size": 16384, "message.timeout.ms": 4000, **config})
    for v in values:
        producer.produce(topic, v, partition=partition, on_delivery=report)
        producer.poll(0)
    producer.flush(15)
    if errors:
        print(f"produce to {topic}-{partition}: {len(acked)} acknowledged, errors {sorted(errors)}")
    return acked


def read_all(bootstrap: str, topic: str, partition: int, timeout_s: float = 15) -> list[bytes]:
    """Every record of the partition, from its start to its high watermark."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "faults", "enable.auto.commit": False})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg.value())
        return out
    finally:
        consumer.close()


def create(bootstrap: str, topic: str, partitions: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(15)


def partitions_in(log_dir: str, topic: str) -> list[str]:
    return sorted(n for n in os.listdir(log_dir) if n.startswith(f"{topic}-") and not n.endswith("-delete"))


def assert_clean_log(broker: BrokerProcess) -> str:
    text = broker.log_text()
    assert "Traceback" not in text, broker.log_tail(80)
    return text


def test_full_dir_refuses_writes_keeps_reads_resumes_and_takes_no_new_partitions(tmp_path: Path, tmpfs: Any) -> None:
    healthy = str(tmp_path / "healthy")
    small = tmpfs("small", 6 << 20)
    broker = BrokerProcess(healthy, {
        "log.dirs": f"{healthy},{small}", "log.segment.bytes": 64 << 10, "log.dir.free.bytes.min": 0,
        "log.dir.free.bytes.alert": 0, "log.dir.check.interval.ms": 200,
        "replica.high.watermark.checkpoint.interval.ms": 100}).start()
    try:
        create(broker.bootstrap, "t", 2)  # one partition in each dir
        assert partitions_in(small, "t") == ["t-1"] and partitions_in(healthy, "t") == ["t-0"]
        ballast = fill(small, 600 << 10)
        values = [value("full", i) for i in range(1500)]
        acked = produce(broker.bootstrap, "t", 1, values)
        assert 0 < len(acked) < len(values)  # the file system filled up on the way
        text = wait_until(lambda: "is full" in broker.log_text() and broker.log_text(), 10, "the 'is full' log line")
        # Meanwhile: the other dir takes writes, the full one serves reads, and a new topic
        # lands on the healthy dir only.
        assert len(produce(broker.bootstrap, "t", 0, [value("other", i) for i in range(20)])) == 20
        assert read_all(broker.bootstrap, "t", 1) == acked
        create(broker.bootstrap, "fresh", 4)
        assert partitions_in(small, "fresh") == [] and len(partitions_in(healthy, "fresh")) == 4
        time.sleep(1)  # several checkpoint passes on the full dir
        os.unlink(ballast)
        more = wait_until(lambda: produce(broker.bootstrap, "t", 1, [value("after", i) for i in range(50)]), 10, "writes to resume")
        assert read_all(broker.bootstrap, "t", 1) == acked + more
        text = assert_clean_log(broker)
        lines = [line for line in text.splitlines() if small in line and ("is full" in line or "resume" in line)]
        assert len(lines) == 2, lines  # once full (with the cause), once resumed
        assert "out of space" in lines[0]
        assert "UNKNOWN_SERVER_ERROR" not in text
    finally:
        broker.stop()
    assert_clean_log(broker)  # shutdown included


def test_free_space_floor_refuses_produce_before_the_disk_fills(tmp_path: Path, tmpfs: Any) -> None:
    small = tmpfs("floor", 8 << 20)
    metrics_port = free_port()
    broker = BrokerProcess(small, {
        "log.segment.bytes": 256 << 10, "log.dir.free.bytes.min": 2 << 20, "log.dir.free.bytes.alert": 3 << 20,
        "log.dir.check.interval.ms": 100, "metrics.listener": f"http://127.0.0.1:{metrics_port}"}).start()
    try:
        create(broker.bootstrap, "t", 1)
        fill(small, 3500 << 10)
        acked: list[bytes] = []
        for round_ in range(6):  # until the floor refuses (well before the disk is full)
            got = produce(broker.bootstrap, "t", 0, [value(f"r{round_}", i) for i in range(400)])
            acked += got
            if len(got) < 400:
                break
        assert 0 < len(acked) < 2400
        stats = os.statvfs(small)
        assert stats.f_bavail * stats.f_frsize > 1 << 20  # refused with space to spare
        assert scraped(metrics_port, "kafka_log_logmanager_logdirectoryrefusingappends", small) == 1
        assert scraped(metrics_port, "kafka_log_logmanager_logdirectorylowspace", small) == 1  # the alert
        assert scraped(metrics_port, "kafka_log_logmanager_offlinelogdirectorycount") == 0
        # No partition can be placed: CreateTopics fails whole, nothing made.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic("late", 3, 1)])["late"].result(15)
        assert refused.value.args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
        assert partitions_in(small, "late") == []
        assert "late" not in admin.list_topics(timeout=10).topics
        assert read_all(broker.bootstrap, "t", 0) == acked
        os.unlink(os.path.join(small, "ballast"))  # space again: produce resumes by itself
        acked += wait_until(lambda: produce(broker.bootstrap, "t", 0, [value("again", i) for i in range(20)]), 10, "produce to resume")
        assert read_all(broker.bootstrap, "t", 0) == acked
        text = assert_clean_log(broker)
        assert sum("under log.dir.free.bytes.min" in line for line in text.splitlines()) == 1
        assert sum("log.dir.free.bytes.min=2097152: produce resumes" in line for line in text.splitlines()) == 1
        assert sum("under log.dir.free.bytes.alert" in line for line in text.splitlines()) == 1
        assert "is full" not in text
    finally:
        broker.stop()
    assert_clean_log(broker)  # shutdown included


class FiuBroker(BrokerProcess):
    """A broker run under libfiu's POSIX preload, its failure points switched with fiu-ctrl."""

    def command(self) -> list[str]:
        return ["fiu-run", "-x", *super().command()]

    def fail(self, point: str, on: bool) -> None:
        command = f"enable name={point},failinfo=5" if on else f"disable name={point}"  # errno 5: EIO
        subprocess.run(["fiu-ctrl", "-c", command, str(self.pid)], check=True, timeout=10)


def dir_error(broker: BrokerProcess, log_dir: str) -> int:
    client = RawClient(broker.host, broker.port)
    try:
        response: Any = client.call(35, 1, {"topics": None})  # DescribeLogDirs v1
    finally:
        client.close()
    return next(r.error_code for r in response.results if r.log_dir == log_dir)


def fetch_error(broker: BrokerProcess, topic: str, partition: int) -> int:
    client = RawClient(broker.host, broker.port)
    try:
        response: Any = client.call(1, 4, {  # Fetch v4
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": partition, "fetch_offset": 0,
                                                          "partition_max_bytes": 1 << 20}]}]})
    finally:
        client.close()
    return int(response.responses[0].partitions[0].error_code)


def scraped(port: int, name: str, log_dir: str | None = None) -> float:
    """A gauge of the broker's metrics endpoint (of ``log_dir`` when given)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    labels = "" if log_dir is None else re.escape(f'{{logDirectory="{log_dir}"}}')
    found = re.search(rf"^{name}{labels} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} {log_dir or ''} not exported"
    return float(found.group(1))


def offline_dir_count(port: int) -> float:
    """Kafka's OfflineLogDirectoryCount."""
    return scraped(port, "kafka_log_logmanager_offlinelogdirectorycount")


def test_eio_on_pwrite_fsync_and_open_takes_the_dir_offline_until_it_passes_a_probe(tmp_path: Path) -> None:
    healthy = str(tmp_path / "healthy")
    failing = str(tmp_path / "failing")
    metrics_port = free_port()
    broker = FiuBroker(healthy, {"log.dirs": f"{healthy},{failing}", "log.dir.check.interval.ms": 300,
                                 "log.segment.bytes": 16 << 10,
                                 "metrics.listener": f"http://127.0.0.1:{metrics_port}"})
    broker.start()
    try:
        create(broker.bootstrap, "t", 2)
        create(broker.bootstrap, "synced", 2, **{"flush.messages": "1"})
        assert partitions_in(failing, "t") == ["t-1"] and partitions_in(failing, "synced") == ["synced-1"]
        acked = {"t": produce(broker.bootstrap, "t", 1, [value("before", i) for i in range(100)]), "synced": []}
        assert len(acked["t"]) == 100
        faults = [("posix/io/rw/pwrite", "t"), ("posix/io/sync/fsync", "synced"), ("posix/io/oc/open", "t")]
        for n, (point, topic) in enumerate(faults):
            broker.fail(point, True)
            try:
                during = produce(broker.bootstrap, topic, 1, [value(f"fault{n}", i) for i in range(200)],
                                 **{"message.timeout.ms": 1000})
                wait_until(lambda: dir_error(broker, failing) == ErrorCode.KAFKA_STORAGE_ERROR, 10, f"{failing} to go offline under {point}")
                assert offline_dir_count(metrics_port) >= 1
                assert fetch_error(broker, topic, 1) == ErrorCode.KAFKA_STORAGE_ERROR
            finally:
                broker.fail(point, False)
            if topic == "synced":
                assert during == []  # no record acknowledged while every fsync failed
            acked[topic] += during
            wait_until(lambda: dir_error(broker, failing) == ErrorCode.NONE and offline_dir_count(metrics_port) == 0, 10, f"{failing} to come back online")
            after = wait_until(lambda t=topic, k=n: produce(broker.bootstrap, t, 1,
                                                            [value(f"after{k}", i) for i in range(50)]), 10, f"writes to resume after {point}")
            acked[topic] += after
        for topic, values in acked.items():
            assert read_all(broker.bootstrap, topic, 1) == values
        text = assert_clean_log(broker)
        offline = [line for line in text.splitlines() if f"Log dir {failing} is offline" in line]
        back = [line for line in text.splitlines() if f"Log dir {failing} passed a write probe" in line]
        assert len(offline) == len(faults) and len(back) == len(faults), offline + back
        assert all("Input/output error (errno 5)" in line for line in offline)
    finally:
        broker.stop()
    assert_clean_log(broker)  # shutdown included


def test_a_roll_on_a_full_disk_fails_the_append_with_a_storage_error(tmp_path: Path, tmpfs: Any) -> None:
    small = tmpfs("roll", 1 << 20)
    errors: list[OSError] = []
    log = Log(os.path.join(small, "t-0"), LogConfig(segment_bytes=4096), new=True)
    log.io_error_handler = lambda _log, exc: errors.append(exc)
    log.append(batch(20, value=b"x" * 100))
    fill(small, 0)
    with pytest.raises(KafkaError) as failed:
        for _ in range(5):  # the next append that must roll finds no room for the new files
            log.append(batch(20, value=b"y" * 100))
    assert failed.value.code == ErrorCode.KAFKA_STORAGE_ERROR
    assert errors and all(exc.errno == 28 for exc in errors)  # ENOSPC, reported to the dir's manager
    os.unlink(os.path.join(small, "ballast"))
    log.append(batch(1, value=b"z"))  # room again: the roll goes through
    assert [v for _o, v in read_records(log)][-1] == b"z-0"
    log.close()


def test_create_topics_that_cannot_make_every_partition_fails_whole(tmp_path: Path, tmpfs: Any) -> None:
    healthy = str(tmp_path / "healthy")
    few_files = tmpfs("inodes", 8 << 20, ",nr_inodes=64")
    broker = BrokerProcess(healthy, {"log.dirs": f"{healthy},{few_files}", "log.dir.check.interval.ms": 60000,
                                     "replica.high.watermark.checkpoint.interval.ms": 60000})
    broker.start()
    try:
        create(broker.bootstrap, "first", 2)  # one partition in each dir
        # Room for bytes, none for files: the second partition of the next topic placed
        # in this dir fails half-way (its directory made, its segment files not).
        fillers = os.path.join(few_files, "fillers")
        os.mkdir(fillers)
        with pytest.raises(OSError):
            for i in range(100):
                open(os.path.join(fillers, str(i)), "wb").close()
        os.unlink(os.path.join(fillers, "0"))  # room for one file: a directory, no segment
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic("half", 4, 1)])["half"].result(15)
        assert refused.value.args[0].code() == ErrorCode.KAFKA_STORAGE_ERROR
        assert "half" not in admin.list_topics(timeout=10).topics
        assert partitions_in(healthy, "half") == [] and partitions_in(few_files, "half") == []
    finally:
        broker.stop()
    assert_clean_log(broker)  # a full dir at shutdown too
