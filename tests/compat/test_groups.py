"""Consumer groups end to end: unmodified kafka-python, confluent-kafka, aiokafka and kcat
group consumers against pykfk-broker processes (issue 4, "What it must show").

Each group member in the main scenario is its own process (this file run as a script), so
``kill -9`` is real: the member gets no chance to leave the group or commit. Members write
what they see to a JSON-lines file, flushed per line, which survives the kill:

    {"assigned": [partition, ...]}        whenever its assignment changes
    {"records": [[partition, offset], ...]}  each poll's records
    {"committed": {"partition": offset}}  after each successful synchronous commit
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import kafka
import pytest

from pykfk.errors import ErrorCode
from pykfk.testing import BrokerProcess, RawClient, wait_until

pytestmark = pytest.mark.slow

PARTITIONS = 12
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms default
HEARTBEAT_MS = 500
# Keeps the first rebalance of every test group short (Kafka's default is 3 s).
BROKER_OVERRIDES = {"group.initial.rebalance.delay.ms": 300}
WAIT_S = 45.0


# -- group members in subprocesses ---------------------------------------------------------


class MemberProcess:
    """A group consumer (``kind`` "kafka-python" or "confluent") in its own process."""

    def __init__(self, name: str, kind: str, bootstrap: str, group: str, topic: str, out_dir: str):
        self.name, self.kind = name, kind
        self.out_path = os.path.join(out_dir, f"{name}.jsonl")
        self.stderr_path = os.path.join(out_dir, f"{name}.stderr")
        with open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, kind, bootstrap, group, topic, self.out_path],
                stdout=subprocess.DEVNULL, stderr=stderr,
            )

    def events(self) -> list[dict]:
        try:
            with open(self.out_path, encoding="utf-8") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:  # a line cut short by kill -9
                pass
        return out

    def assignment(self) -> set[int]:
        assigned = [e["assigned"] for e in self.events() if "assigned" in e]
        return set(assigned[-1]) if assigned else set()

    def records(self) -> list[tuple[int, int]]:
        return [tuple(r) for e in self.events() if "records" in e for r in e["records"]]

    def last_commits(self) -> dict[int, int]:
        commits: dict[int, int] = {}
        for e in self.events():
            for p, offset in e.get("committed", {}).items():
                commits[int(p)] = max(commits.get(int(p), -1), offset)
        return commits

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """SIGTERM: the member commits, leaves the group and exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert code == 0, f"{self.name} exited with {code}: {self.stderr()}"

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]


def _member_main(kind: str, bootstrap: str, group: str, topic: str, out_path: str) -> None:
    """A member process: consume, commit synchronously after each poll, log everything."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(out_path, "a", encoding="utf-8") as out:

        def emit(**event) -> None:
            out.write(json.dumps(event) + "\n")
            out.flush()

        if kind == "kafka-python":
            _run_kafka_python_member(bootstrap, group, topic, stop, emit)
        else:
            _run_confluent_member(bootstrap, group, topic, stop, emit)
        emit(closed=True)


def _run_kafka_python_member(bootstrap, group, topic, stop, emit) -> None:
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"kp-{os.getpid()}",
        auto_offset_reset="earliest", enable_auto_commit=False,
        session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS,
    )
    assigned = None
    while not stop.is_set():
        batch = consumer.poll(timeout_ms=200)
        now = {tp.partition for tp in consumer.assignment()}
        if now != assigned:
            assigned = now
            emit(assigned=sorted(now))
        records = [[r.partition, r.offset] for rs in batch.values() for r in rs]
        if records:
            emit(records=records)
            positions = {tp.partition: consumer.position(tp) for tp in batch}
            try:
                consumer.commit()
                emit(committed=positions)
            except KafkaError as exc:  # a rebalance started: the next owner re-reads
                emit(commit_failed=repr(exc))
    consumer.close()  # nothing more to commit (auto-commit off); leaves the group


def _run_confluent_member(bootstrap, group, topic, stop, emit) -> None:
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "client.id": f"ck-{os.getpid()}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
    })
    consumer.subscribe([topic])
    assigned = None
    while not stop.is_set():
        messages = consumer.consume(num_messages=500, timeout=0.2)
        now = {tp.partition for tp in consumer.assignment()}
        if now != assigned:
            assigned = now
            emit(assigned=sorted(now))
        records = [[m.partition(), m.offset()] for m in messages if m.error() is None]
        if records:
            emit(records=records)
            touched = {p for p, _ in records}
            try:
                done = consumer.commit(asynchronous=False)
                emit(committed={tp.partition: tp.offset for tp in done
                                if tp.partition in touched and tp.offset >= 0})
            except KafkaException as exc:
                emit(commit_failed=repr(exc))
    consumer.close()


# -- helpers -------------------------------------------------------------------------------


def _create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def _produce(bootstrap: str, topic: str, per_partition: int, tag: str,
             partitions: int = PARTITIONS) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        for i in range(per_partition):
            for p in range(partitions):
                producer.send(topic, value=f"{tag}-{p}-{i}".encode(), partition=p)
        producer.flush(30)
    finally:
        producer.close()


def _committed(bootstrap: str, group: str) -> dict[int, int]:
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return {tp.partition: om.offset for tp, om in admin.list_group_offsets(group)[group].items()}
    finally:
        admin.close()


def _drain_kafka_python(bootstrap: str, group: str, topic: str, expected: int,
                        quiet_s: float = 1.5) -> list[tuple[int, int, bytes]]:
    """Join ``group`` with a fresh kafka-python consumer, read until ``expected`` records
    came (then ``quiet_s`` more to catch extras), commit and leave."""
    consumer = kafka.KafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
        heartbeat_interval_ms=HEARTBEAT_MS)
    got: list[tuple[int, int, bytes]] = []
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and len(got) < expected:
            for rs in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset, r.value) for r in rs]
        quiet_end = time.monotonic() + quiet_s
        while time.monotonic() < quiet_end:
            for rs in consumer.poll(timeout_ms=200).values():
                got += [(r.partition, r.offset, r.value) for r in rs]
        assert len(consumer.assignment()) == PARTITIONS
        consumer.commit()
    finally:
        consumer.close()
    return got


# -- the scenario ------------------------------------------------------------------


def test_mixed_group_kill_takeover_late_join_resume_and_broker_restart(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), BROKER_OVERRIDES).start()
    members: list[MemberProcess] = []
    try:
        topic, group = "orders", "billing"
        _create_topic(broker.bootstrap, topic)
        _produce(broker.bootstrap, topic, 50, "first")
        end = 50

        def member(name: str, kind: str) -> MemberProcess:
            m = MemberProcess(name, kind, broker.bootstrap, group, topic, str(tmp_path))
            members.append(m)
            return m

        kp1, ck1, kp2 = member("kp1", "kafka-python"), member("ck1", "confluent"), member("kp2", "kafka-python")

        def seen() -> Counter:
            return Counter(r for m in members for r in m.records())

        def all_read(up_to: int) -> bool:
            got = seen()
            return all((p, o) in got for p in range(PARTITIONS) for o in range(up_to))

        def split(group_members, sizes) -> bool:
            assignments = [m.assignment() for m in group_members]
            return (sorted(len(a) for a in assignments) == sorted(sizes)
                    and set().union(*assignments) == set(range(PARTITIONS)))

        # Three members of two client kinds share the 12 partitions evenly.
        wait_until(lambda: split([kp1, ck1, kp2], [4, 4, 4]) and all_read(end), WAIT_S, "an even 4/4/4 split and every record read")

        # ListGroups / DescribeGroups through kafka-python's admin client.
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            # ListGroups v4+ adds the state, v5+ the type (classic here).
            listed = [g for g in admin.list_groups() if g["group_id"] == group]
            assert [(g["protocol_type"], g.get("group_type", "classic")) for g in listed] == [("consumer", "classic")]
            described = admin.describe_groups([group])[group]
        finally:
            admin.close()
        assert described["group_state"] == "Stable"
        assert described["protocol_type"] == "consumer"
        assert described["protocol_data"] in ("range", "roundrobin")
        by_client = {m["client_id"]: m for m in described["members"]}
        pids = {f"kp-{kp1.proc.pid}": kp1, f"ck-{ck1.proc.pid}": ck1, f"kp-{kp2.proc.pid}": kp2}
        assert set(by_client) == set(pids)
        for client_id, m in by_client.items():
            assert m["client_host"] == "/127.0.0.1"
            assert m["member_metadata"]["topics"] == [topic]
            parts = m["member_assignment"]["assigned_partitions"]
            assert [(a["topic"], set(a["partitions"])) for a in parts] == [(topic, pids[client_id].assignment())]

        # kill -9 one member while records keep coming; the others take its partitions
        # once its session runs out, and read everything.
        victim_partitions = ck1.assignment()

        def feed() -> None:  # 50 more per partition, in rounds, so the kill lands mid-stream
            for round_ in range(5):
                _produce(broker.bootstrap, topic, 10, f"second{round_}")
                time.sleep(0.2)

        feeder = threading.Thread(target=feed)
        feeder.start()
        wait_until(lambda: any(o >= end for _, o in ck1.records()), WAIT_S, "the victim to read new records")
        ck1.kill()
        killed_at = time.monotonic()
        feeder.join(60)
        end += 50
        wait_until(lambda: split([kp1, kp2], [6, 6]), WAIT_S, "the survivors to take over")
        took_over_s = time.monotonic() - killed_at
        assert took_over_s < SESSION_TIMEOUT_MS / 1000 + 15
        wait_until(lambda: all_read(end), WAIT_S, "every record after the takeover")

        # The survivors resumed the victim's partitions from its last commit: never before
        # what it had committed, never past what it had read.
        victim_commits = ck1.last_commits()
        victim_max = defaultdict(lambda: -1)
        for p, o in ck1.records():
            victim_max[p] = max(victim_max[p], o)
        for p in victim_partitions:
            first = min(o for m in (kp1, kp2) for q, o in m.records() if q == p)
            assert victim_commits.get(p, 0) <= first <= victim_max[p] + 1, (p, first)

        # A member that joins later gets its share, and reads new records.
        ck2 = member("ck2", "confluent")
        wait_until(lambda: split([kp1, kp2, ck2], [4, 4, 4]), WAIT_S, "the late joiner to get partitions")
        _produce(broker.bootstrap, topic, 20, "third")
        end += 20
        wait_until(lambda: all_read(end), WAIT_S, "every record after the late join")
        assert {p for p, o in ck2.records() if o >= end - 20} == ck2.assignment()

        # At least once: nothing lost (checked above); a record read twice was never
        # committed past by more than one of its readers (duplicates only after commits).
        readers = defaultdict(set)
        for m in members:
            for r in m.records():
                readers[r].add(m)
        for (p, o), who in readers.items():
            if len(who) > 1:
                committed_past = [m.name for m in who if m.last_commits().get(p, -1) > o]
                assert len(committed_past) <= 1, ((p, o), committed_past)
        assert sum(seen().values()) <= PARTITIONS * end + PARTITIONS * 50  # bounded rereads

        for m in (kp1, kp2, ck2):
            m.stop()
        assert _committed(broker.bootstrap, group) == {p: end for p in range(PARTITIONS)}

        # A consumer restarted in the group resumes right after the committed offsets.
        _produce(broker.bootstrap, topic, 3, "fourth")
        got = _drain_kafka_python(broker.bootstrap, group, topic, 3 * PARTITIONS)
        assert sorted((p, o) for p, o, _ in got) == sorted(
            (p, o) for p in range(PARTITIONS) for o in range(end, end + 3))
        end += 3
        assert _committed(broker.bootstrap, group) == {p: end for p in range(PARTITIONS)}

        # Committed offsets survive a clean broker restart and a kill -9 of the broker.
        broker.restart()
        assert _committed(broker.bootstrap, group) == {p: end for p in range(PARTITIONS)}
        broker.restart(clean=False)
        assert _committed(broker.bootstrap, group) == {p: end for p in range(PARTITIONS)}
        _produce(broker.bootstrap, topic, 1, "fifth")
        got = _drain_kafka_python(broker.bootstrap, group, topic, PARTITIONS)
        assert sorted((p, o) for p, o, _ in got) == [(p, end) for p in range(PARTITIONS)]
    finally:
        for m in members:
            if m.proc.poll() is None:
                m.proc.kill()
                m.proc.wait(10)
        broker.stop()
    assert "Traceback" not in broker.log_text(), broker.log_tail()


# -- bad input against a live group ---------------------------------------------------------


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    broker = BrokerProcess(str(tmp_path_factory.mktemp("groups") / "data"), BROKER_OVERRIDES)
    broker.start()
    yield broker
    assert broker.stop() == 0, broker.log_tail()
    assert "Traceback" not in broker.log_text(), broker.log_tail()


OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT = 8, 9, 10, 11, 12
LEAVE_GROUP, SYNC_GROUP, DESCRIBE_GROUPS, DELETE_GROUPS = 13, 14, 15, 42


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, port = bootstrap.rsplit(":", 1)
    return host, int(port)


class GroupReader(threading.Thread):
    """A kafka-python group consumer in a thread: reads, commits synchronously."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        super().__init__(daemon=True)
        self.consumer = kafka.KafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=HEARTBEAT_MS)
        self.records: list[tuple[int, int]] = []
        self.commit_errors: list[str] = []
        self.assigned: set[int] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            batch = self.consumer.poll(timeout_ms=200)
            self.assigned = {tp.partition for tp in self.consumer.assignment()}
            new = [(r.partition, r.offset) for rs in batch.values() for r in rs]
            if new:
                self.records += new
                try:
                    self.consumer.commit()
                except kafka.errors.KafkaError as exc:
                    self.commit_errors.append(repr(exc))
        self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def _join_body(group: str, member_id: str, metadata: bytes = b"", **kw) -> dict:
    body = {"group_id": group, "session_timeout_ms": SESSION_TIMEOUT_MS,
            "rebalance_timeout_ms": 30000, "member_id": member_id, "group_instance_id": None,
            "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": metadata}]}
    body.update(kw)
    return body


def _commit_body(group: str, generation: int, member_id: str, topics: dict) -> dict:
    return {"group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
            "retention_time_ms": -1,
            "topics": [{"name": name, "partitions": [
                {"partition_index": p, "committed_offset": offset, "committed_metadata": meta}
                for p, offset, meta in parts]} for name, parts in topics.items()]}


def _commit_codes(response) -> dict:
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


def test_bad_group_requests_get_kafka_errors_and_the_group_keeps_working(group_broker):
    E = ErrorCode
    topic, group = "ledger", "steady"
    _create_topic(group_broker.bootstrap, topic, 3)
    _produce(group_broker.bootstrap, topic, 10, "before", partitions=3)
    reader = GroupReader(group_broker.bootstrap, group, topic)
    reader.start()
    raw = RawClient(*_host_port(group_broker.bootstrap))
    try:
        wait_until(lambda: reader.assigned == {0, 1, 2} and len(reader.records) == 30, WAIT_S, "the real consumer to read everything")
        found = raw.call(FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
        assert (found.error_code, found.port) == (E.NONE, group_broker.port)
        described = raw.call(DESCRIBE_GROUPS, 3, {"groups": [group],
                                                  "include_authorized_operations": False}).groups[0]
        assert (described.error_code, described.group_state, len(described.members)) == (E.NONE, "Stable", 1)
        member = described.members[0].member_id
        stale = 1_000_000  # a generation this group never had

        # Unknown member ids.
        assert raw.call(HEARTBEAT, 3, {"group_id": group, "generation_id": 1, "member_id": "ghost",
                                       "group_instance_id": None}).error_code == E.UNKNOWN_MEMBER_ID
        assert raw.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": 1, "member_id": "ghost",
                                        "group_instance_id": None, "assignments": []}
                        ).error_code == E.UNKNOWN_MEMBER_ID
        assert raw.call(JOIN_GROUP, 5, _join_body(group, "ghost")).error_code == E.UNKNOWN_MEMBER_ID
        assert raw.call(LEAVE_GROUP, 1, {"group_id": group, "member_id": "ghost"}).error_code == E.UNKNOWN_MEMBER_ID
        codes = _commit_codes(raw.call(OFFSET_COMMIT, 3, _commit_body(group, 1, "ghost", {topic: [(0, 0, "")]})))
        assert codes == {(topic, 0): E.UNKNOWN_MEMBER_ID}

        # Stale generations from the real member's id: refused, the member is untouched.
        assert raw.call(HEARTBEAT, 3, {"group_id": group, "generation_id": stale, "member_id": member,
                                       "group_instance_id": None}).error_code == E.ILLEGAL_GENERATION
        assert raw.call(SYNC_GROUP, 3, {"group_id": group, "generation_id": stale, "member_id": member,
                                        "group_instance_id": None, "assignments": []}
                        ).error_code == E.ILLEGAL_GENERATION
        codes = _commit_codes(raw.call(OFFSET_COMMIT, 3, _commit_body(
            group, stale, member, {topic: [(0, 0, "")], "no-such-topic": [(0, 0, "")]})))
        assert codes == {(topic, 0): E.ILLEGAL_GENERATION, ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}

        # Commits for partitions that do not exist, and oversized commit metadata, in a
        # group that commits without members (generation -1).
        codes = _commit_codes(raw.call(OFFSET_COMMIT, 3, _commit_body("loose", -1, "", {
            topic: [(0, 5, "ok"), (7, 5, ""), (1, 5, "x" * 5000)], "no-such-topic": [(0, 5, "")]})))
        assert codes == {(topic, 0): E.NONE, (topic, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
                         (topic, 1): E.OFFSET_METADATA_TOO_LARGE,
                         ("no-such-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
        fetched = raw.call(OFFSET_FETCH, 3, {"group_id": "loose", "topics": None})
        assert [(t.name, p.partition_index, p.committed_offset, p.metadata)
                for t in fetched.topics for p in t.partitions] == [(topic, 0, 5, "ok")]

        # Huge member metadata (past group.member.metadata.max.bytes, 1 MiB): refused
        # without joining, so no rebalance for the real member.
        huge = raw.call(JOIN_GROUP, 5, _join_body(group, "", b"\0" * (2 << 20)))
        assert huge.error_code == E.INVALID_REQUEST
        many = raw.call(JOIN_GROUP, 5, _join_body(group, "", protocols=[
            {"name": f"p{i}", "metadata": b"\0" * (300 << 10)} for i in range(4)]))
        assert many.error_code == E.INVALID_REQUEST

        # Other bad joins: session timeout out of bounds, another protocol type, no group id.
        assert raw.call(JOIN_GROUP, 5, _join_body(group, "", session_timeout_ms=1000)
                        ).error_code == E.INVALID_SESSION_TIMEOUT
        assert raw.call(JOIN_GROUP, 5, _join_body(group, "", protocol_type="connect")
                        ).error_code == E.INCONSISTENT_GROUP_PROTOCOL
        assert raw.call(JOIN_GROUP, 5, _join_body("", "")).error_code == E.INVALID_GROUP_ID
        deleted = raw.call(DELETE_GROUPS, 1, {"groups_names": [group, "never-existed"]})
        assert [(r.group_id, r.error_code) for r in deleted.results] == [
            (group, E.NON_EMPTY_GROUP), ("never-existed", E.GROUP_ID_NOT_FOUND)]

        # The group never noticed: same single member, still Stable, still reading and
        # committing.
        after = raw.call(DESCRIBE_GROUPS, 3, {"groups": [group],
                                              "include_authorized_operations": False}).groups[0]
        assert (after.group_state, [m.member_id for m in after.members]) == ("Stable", [member])
        _produce(group_broker.bootstrap, topic, 10, "after", partitions=3)
        wait_until(lambda: len(reader.records) == 60, WAIT_S, "the real consumer to read new records")
        assert sorted(reader.records) == [(p, o) for p in range(3) for o in range(20)]
        assert reader.commit_errors == []
    finally:
        raw.close()
        reader.stop()
    assert _committed(group_broker.bootstrap, group) == {0: 20, 1: 20, 2: 20}


# -- kcat and aiokafka group consumers --------------------------------------------------------

KCAT = "/usr/bin/kcat"


def _kcat_group(bootstrap: str, group: str, topic: str, count: int) -> list[tuple[int, int, str]]:
    """``kcat -G`` (librdkafka's balanced consumer, auto-commit on) until ``count``
    messages came; kcat then closes its consumer, which commits and leaves the group."""
    out = subprocess.run(
        [KCAT, "-b", bootstrap, "-G", group, "-c", str(count), "-q", "-f", "%p %o %s\\n",
         "-X", "auto.offset.reset=earliest", "-X", f"session.timeout.ms={SESSION_TIMEOUT_MS}",
         topic],
        capture_output=True, timeout=WAIT_S, check=True, text=True)
    return [(int(p), int(o), v) for p, o, v in (line.split(" ", 2) for line in out.stdout.splitlines())]


def test_kcat_group_consumer_commits_and_resumes(group_broker):
    topic, group = "kcat-groups", "kcat"
    _create_topic(group_broker.bootstrap, topic, 4)
    _produce(group_broker.bootstrap, topic, 5, "a", partitions=4)
    first = _kcat_group(group_broker.bootstrap, group, topic, 20)
    assert sorted((p, o) for p, o, _ in first) == [(p, o) for p in range(4) for o in range(5)]
    assert _committed(group_broker.bootstrap, group) == {p: 5 for p in range(4)}
    # The same group again: only what came after the commit.
    _produce(group_broker.bootstrap, topic, 2, "b", partitions=4)
    second = _kcat_group(group_broker.bootstrap, group, topic, 8)
    assert sorted((p, o, v) for p, o, v in second) == [
        (p, o, f"b-{p}-{o - 5}") for p in range(4) for o in (5, 6)]


def test_aiokafka_group_consumer_commits_and_resumes(group_broker):
    import asyncio

    import aiokafka

    topic, group = "aio-groups", "aio"
    _create_topic(group_broker.bootstrap, topic, 3)
    _produce(group_broker.bootstrap, topic, 4, "a", partitions=3)

    async def consume(expected: int) -> list[tuple[int, int]]:
        consumer = aiokafka.AIOKafkaConsumer(
            topic, bootstrap_servers=group_broker.bootstrap, group_id=group,
            auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_MS)
        await consumer.start()
        got: list[tuple[int, int]] = []
        try:
            async with asyncio.timeout(WAIT_S):
                while len(got) < expected:
                    batches = await consumer.getmany(timeout_ms=200)
                    got += [(r.partition, r.offset) for rs in batches.values() for r in rs]
            assert {tp.partition for tp in consumer.assignment()} == {0, 1, 2}
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    first = asyncio.run(consume(12))
    assert sorted(first) == [(p, o) for p in range(3) for o in range(4)]
    assert _committed(group_broker.bootstrap, group) == {p: 4 for p in range(3)}
    _produce(group_broker.bootstrap, topic, 1, "b", partitions=3)
    assert sorted(asyncio.run(consume(3))) == [(p, 4) for p in range(3)]


if __name__ == "__main__":
    _member_main(*sys.argv[1:6])
