"""A leader's log dir fails (EIO injected with libfiu into its pwrite calls): its
partitions go offline there, leadership moves to another in-sync replica, acks=all
producers carry on without losing a record, and the dir comes back (a write probe)
with its replicas following again, without a restart."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from pykfk.testing import BrokerProcess, wait_until

from .conftest import Cluster

TOPIC = "dirfail"


class FiuBroker(BrokerProcess):
    """A broker run under libfiu's POSIX preload, its failure points switched with fiu-ctrl."""

    def command(self) -> list[str]:
        return ["fiu-run", "-x", *super().command()]

    def fail(self, point: str, on: bool) -> None:
        command = f"enable name={point},failinfo=5" if on else f"disable name={point}"  # errno 5: EIO
        subprocess.run(["fiu-ctrl", "-c", command, str(self.pid)], check=True, timeout=10)


def read_all(bootstrap: str, end: int) -> dict[int, bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dirfail", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 30
        while len(out) < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out[msg.offset()] = msg.value()
        return out
    finally:
        consumer.close()


@pytest.mark.timeout(180)
def test_an_offline_log_dir_moves_leadership_and_acks_all_writes_go_on(tmp_path: Any, zookeeper_server: Any) -> None:
    cluster = Cluster(str(tmp_path / "cluster"), zookeeper_server, 3,
                      {"log.dir.check.interval.ms": 300, "min.insync.replicas": 2})
    for broker_id, plain in list(cluster.brokers.items()):
        cluster.brokers[broker_id] = FiuBroker(plain.log_dir, plain.overrides)
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1, 3)
        cluster.wait_for_full_isr(TOPIC, 1)
        victim = cluster.leader(TOPIC, 0)
        broker = cluster.brokers[victim]
        assert isinstance(broker, FiuBroker)
        acked: dict[int, bytes] = {}
        failed: list[Any] = []

        def report(err: Any, msg: Any) -> None:
            if err is None:
                acked[msg.offset()] = msg.value()
            else:
                failed.append(err)

        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000})
        stop = threading.Event()

        def produce() -> None:
            seq = 0
            while not stop.is_set() and seq < 20000:
                producer.produce(TOPIC, b"%08d" % seq, partition=0, on_delivery=report)
                producer.poll(0.002)
                seq += 1
            producer.flush(90)

        sender = threading.Thread(target=produce, name="producer")
        sender.start()
        try:
            wait_until(lambda: len(acked) > 200, 20, "records acknowledged before the fault")
            broker.fail("posix/io/rw/pwrite", True)
            try:
                wait_until(lambda: cluster.leader(TOPIC, 0) not in (victim, -1), 20, "leadership moved off the failed dir")
                new_leader = cluster.leader(TOPIC, 0)
                before = len(acked)
                wait_until(lambda: len(acked) > before + 200, 30, "acks=all writes going on under the new leader")
            finally:
                broker.fail("posix/io/rw/pwrite", False)
            # The dir passes a probe: its replica follows the new leader and joins the ISR again.
            wait_until(lambda: victim in cluster.isr(TOPIC, 0), 60, "the failed broker back in the ISR")
        finally:
            stop.set()
            sender.join(120)
        assert not sender.is_alive()
        assert not failed, failed[:5]
        assert cluster.leader(TOPIC, 0) == new_leader != victim
        records = read_all(cluster.bootstrap, max(acked) + 1)
        missing = [offset for offset, value in acked.items() if records.get(offset) != value]
        assert not missing, f"{len(missing)} acknowledged records lost, first at {missing[:5]}"
        text = broker.log_text()
        assert "Traceback" not in text, broker.log_tail(60)
        offline = [line for line in text.splitlines() if "is offline: Input/output error (errno 5)" in line]
        assert len(offline) == 1, offline
        assert "passed a write probe" in text
    finally:
        cluster.close()
