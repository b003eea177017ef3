"""Static members (``group.instance.id``) of classic groups keep consuming while their
group coordinator, a standalone broker process, restarts:

- stopped with SIGTERM and started again within the members' session timeout: the
  coordinator reloads the members from ``__consumer_offsets`` and nobody rebalances;
- killed with SIGKILL and away longer than the session timeout: librdkafka then gives up
  its member id and sends its heartbeats and commits with the instance id alone until it
  joined again; the coordinator must not fence such a member (FENCED_INSTANCE_ID is fatal
  to the consumer) but give it its place and partitions back.

Two confluent-kafka members share one group; a kafka-python static member has a group of
its own; two more confluent-kafka members share a group of the consumer protocol
(KIP-848, ``group.protocol=consumer``). Every record written after each restart is
consumed by every group.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka.errors import KafkaError as KafkaPythonError

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient

TOPIC = "static-restart"
PARTITIONS = 4
SESSION_TIMEOUT_MS = 3000
ROUND = 40  # records written after each restart


class Member(threading.Thread):
    """A static member consuming in a thread: what it read, its assignments, its errors."""

    def __init__(self, bootstrap: str, kind: str, group: str, instance: str):
        super().__init__(name=f"{kind}-{instance}", daemon=True)
        self.bootstrap, self.kind, self.group, self.instance = bootstrap, kind, group, instance
        self.seen: set[tuple[int, int]] = set()
        self.assignments: list[set[int]] = []
        self.errors: list[str] = []
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self._run_kafka_python() if self.kind == "kafka-python" else self._run_confluent()
        except Exception as exc:  # noqa: BLE001 - the test reports what stopped the member
            self.errors.append(repr(exc))

    def _run_confluent(self) -> None:
        def on_error(error: KafkaError) -> None:
            if error.fatal():
                self.errors.append(str(error))

        settings = {
            "bootstrap.servers": self.bootstrap, "group.id": self.group, "group.instance.id": self.instance,
            "auto.offset.reset": "earliest", "auto.commit.interval.ms": 300,
            "reconnect.backoff.max.ms": 300, "error_cb": on_error}
        if self.kind == "confluent":
            settings.update({"session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": 300})
        else:  # the broker sets the session of a consumer-protocol member
            settings["group.protocol"] = "consumer"
        consumer = Consumer(settings)
        consumer.subscribe([TOPIC], on_assign=lambda c, ps: self.assignments.append({p.partition for p in ps}))
        try:
            for _ in range(1200):  # 0.05 s polls: at most a minute
                if self.done.is_set() or self.errors:
                    return
                message = consumer.poll(0.05)
                if message is None:
                    continue
                if message.error():
                    if message.error().fatal():
                        self.errors.append(str(message.error()))
                    continue
                self.seen.add((message.partition(), message.offset()))
        finally:
            consumer.close()

    def _run_kafka_python(self) -> None:
        consumer = KafkaConsumer(
            TOPIC, bootstrap_servers=self.bootstrap, group_id=self.group, group_instance_id=self.instance,
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=300, auto_offset_reset="earliest",
            auto_commit_interval_ms=300, reconnect_backoff_max_ms=300)
        try:
            # Polls of a second: kafka-python 3.0 can drop a SyncGroup answer that arrives
            # after a poll ran out of time during a join, and keep no partitions.
            for _ in range(60):  # at most a minute
                if self.done.is_set():
                    return
                try:
                    polled = consumer.poll(timeout_ms=1000)
                except KafkaPythonError as exc:
                    if not exc.retriable:  # FencedInstanceIdError is not
                        raise
                    continue  # the broker is away: a user polls again
                for tp, records in polled.items():
                    self.seen.update((tp.partition, r.offset) for r in records)
        finally:
            consumer.close()


def _write(producer: Producer, count: int, first: int) -> set[tuple[int, int]]:
    """``count`` records spread over the partitions; their (partition, offset)s."""
    written: set[tuple[int, int]] = set()

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        written.add((message.partition(), message.offset()))

    for i in range(first, first + count):
        producer.produce(TOPIC, str(i).encode(), partition=i % PARTITIONS, on_delivery=delivered)
    assert producer.flush(30) == 0
    return written


def _consumed_by_all(members: list[Member], groups: list[list[Member]], written: set[tuple[int, int]],
                     what: str) -> None:
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        errors = [(m.name, e) for m in members for e in m.errors]
        assert not errors, f"{what}: {errors}"
        missing = [sorted(written - set().union(*(m.seen for m in group)))[:5] for group in groups]
        if not any(missing):
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: records not consumed: {missing}")


@pytest.mark.timeout(150)
def test_static_members_keep_consuming_across_coordinator_restarts(tmp_path: Any) -> None:
    broker = BrokerProcess(str(tmp_path / "data"), {
        "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
        "group.consumer.session.timeout.ms": SESSION_TIMEOUT_MS, "group.consumer.heartbeat.interval.ms": 300}).start()
    members: list[Member] = []
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(20)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "reconnect.backoff.max.ms": 300})
        pair = [Member(broker.bootstrap, "confluent", "pair", f"host-{n}") for n in "ab"]
        alone = Member(broker.bootstrap, "kafka-python", "alone", "host-k")
        kip848 = [Member(broker.bootstrap, "confluent-kip848", "next", f"next-{n}") for n in "ab"]
        members = [*pair, alone, *kip848]
        groups = [pair, [alone], kip848]
        for member in members:
            member.start()
        written = _write(producer, ROUND, 0)
        _consumed_by_all(members, groups, written, "before any restart")
        deadline = time.monotonic() + 20
        while not all(m.assignments and len(m.assignments[-1]) == PARTITIONS // 2 for m in pair):
            assert time.monotonic() < deadline, [m.assignments for m in pair]
            time.sleep(0.05)
        places = [m.assignments[-1] for m in pair]
        rebalances = [len(m.assignments) for m in pair]

        # SIGTERM, back at once: the members keep their partitions, nobody rebalances.
        broker.restart(clean=True)
        written |= _write(producer, ROUND, ROUND)
        _consumed_by_all(members, groups, written, "after a restart with SIGTERM")
        assert [len(m.assignments) for m in pair] == rebalances, [m.assignments for m in pair]

        # SIGKILL, away longer than the session timeout: librdkafka drops its member id
        # and revokes; each member gets its own partitions back, none is fenced.
        broker.kill()
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 1)
        broker.start()
        written |= _write(producer, ROUND, 2 * ROUND)
        _consumed_by_all(members, groups, written, "after SIGKILL and an outage over the session timeout")
        assert [m.assignments[-1] for m in pair] == places, [m.assignments for m in pair]
        assert all(len(m.assignments) > n for m, n in zip(pair, rebalances)), "the members never lost their session"
        time.sleep(1)  # commits and heartbeats of the rejoined members
        assert not [e for m in members for e in m.errors]

        # What librdkafka sends between dropping its member id and joining again: a
        # heartbeat with the instance id alone. It must join again, not die.
        raw = RawClient(broker.host, broker.port)
        try:
            answer = raw.call(12, 3, {"group_id": "pair", "generation_id": 1, "member_id": "",
                                      "group_instance_id": "host-a"})
        finally:
            raw.close()
        assert answer.error_code == ErrorCode.UNKNOWN_MEMBER_ID  # type: ignore[attr-defined]
    finally:
        for member in members:
            member.done.set()
        for member in members:
            member.join(20)
        broker.stop()
    assert "Traceback" not in broker.log_text()
