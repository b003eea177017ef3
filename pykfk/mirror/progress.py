"""The mirror's progress and offset syncs, kept in the target cluster so a restarted (or
another) mirror process resumes where the last one stopped and translates group offsets
from before its time.

One compacted topic in the target (``progress.topic``, one partition) holds, per source
partition, the next source offset to copy and where the target stood then:

    key    JSON ["<source topic>", <partition>]
    value  JSON {"offset": <next source offset>, "target_topic": "<remote topic>",
                 "target_partition": <p or -1>, "target_offset": <target end or -1>,
                 "audit": [{"end": <source offset>, "windows": [[<window start>, <count>], ...]}],
                 "time": <ms>}

A value is written only after every record before ``offset`` was acknowledged by the
target (acks=all), so resuming from any value written never skips a record; with
exactly.once it is written in the same transaction as the records it vouches for, and
read with read_committed, so resuming from it never repeats one either. ``audit`` holds
the audit counts of the copied ranges ending at ``end`` (exclusive) that the audit
cluster had not acknowledged yet (mirror/audit.py): committed with the progress, they
are published again by whoever resumes.

The offset syncs (``offset-syncs.topic``, MirrorMaker 2's ``mm2-offset-syncs.<source
alias>.internal``, compacted, one partition) are pairs of one source partition:

    key    JSON ["<source topic>", <partition>]
    value  JSON {"upstream_offset": <source offset>, "downstream_offset": <target offset>,
                 "time": <ms>}

Every source record at or after ``upstream_offset`` is in the target (same partition
number) at or after ``downstream_offset``: translating a group offset with the newest
sync at or before it skips nothing, and reads again what was copied since the sync.
Syncs are written with the progress (in the same transaction with exactly.once, so they
never name aborted copies): the progress pair itself, the first record copied after a
partition was assigned, and with exactly.once the exact target offset of a record at
least every ``offset.lag.max`` source offsets.
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition

from pykfk.mirror.config import ClientConfig
from pykfk.mirror.health import retry_metadata_pending

__all__ = ["AuditRange", "OffsetSyncs", "ProgressEntry", "ProgressStore", "read_compacted"]

# How many offset syncs per partition are kept for translating group offsets. Past it
# every other sync of the older half goes (as MirrorMaker 2 keeps its syncs): recent
# offsets translate within offset.lag.max, older ones more coarsely, none is lost.
SYNCS_KEPT = 1000
# Longest a read of an internal topic up to its end may take (seconds).
READ_TIMEOUT_S = 30


@dataclass(frozen=True)
class AuditRange:
    """The audit counts of a partition's records copied up to source offset ``end``
    (exclusive) since the previous range: (window start, records) pairs."""

    end: int
    windows: tuple[tuple[int, int], ...]

    def to_json(self) -> dict[str, object]:
        return {"end": self.end, "windows": [list(w) for w in self.windows]}

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> AuditRange:
        windows = doc["windows"]
        assert isinstance(windows, list)
        return cls(int(str(doc["end"])), tuple((int(w[0]), int(w[1])) for w in windows))


@dataclass(frozen=True)
class ProgressEntry:
    offset: int
    target_topic: str
    target_partition: int
    target_offset: int
    audit: tuple[AuditRange, ...] = ()

    def encode(self) -> bytes:
        doc: dict[str, object] = {
            "offset": self.offset, "target_topic": self.target_topic,
            "target_partition": self.target_partition, "target_offset": self.target_offset,
            "time": int(time.time() * 1000),
        }
        if self.audit:
            doc["audit"] = [r.to_json() for r in self.audit]
        return json.dumps(doc).encode()

    @classmethod
    def decode(cls, data: bytes) -> ProgressEntry:
        doc = json.loads(data)
        audit = tuple(AuditRange.from_json(r) for r in doc.get("audit", ()))
        return cls(int(doc["offset"]), str(doc["target_topic"]), int(doc["target_partition"]),
                   int(doc["target_offset"]), audit)


def encode_sync(upstream_offset: int, downstream_offset: int) -> bytes:
    return json.dumps({"upstream_offset": upstream_offset, "downstream_offset": downstream_offset,
                       "time": int(time.time() * 1000)}).encode()


def progress_key(topic: str, partition: int) -> bytes:
    return json.dumps([topic, partition]).encode()


def read_compacted(consumer: Consumer, topic: str, positions: dict[int, int] | None = None,
                   timeout_s: float = READ_TIMEOUT_S, ends_from: Consumer | None = None) -> Iterator[Message]:
    """Messages of every partition of ``topic`` from ``positions`` (default: the start)
    up to the end offsets at the time of the call. ``positions`` is updated in place so a
    later call continues where this one stopped.

    The ends are ``ends_from``'s view (default: ``consumer``'s). A read_committed
    ``consumer`` with a read_uncommitted ``ends_from`` reads up to the high watermark,
    so it waits for the transactions open at the time of the call to end: what it returns
    then includes every transaction committed before the call."""
    metadata = consumer.list_topics(topic, timeout=timeout_s)
    info = metadata.topics.get(topic)
    if info is None or info.error is not None:
        return
    positions = {} if positions is None else positions
    ends: dict[int, int] = {}
    for partition in info.partitions:
        high = _watermarks(ends_from or consumer, topic, partition, timeout_s)[1]
        if high > positions.get(partition, 0):
            ends[partition] = high
    if not ends:
        return
    consumer.assign([TopicPartition(topic, p, positions.get(p, OFFSET_BEGINNING)) for p in ends])
    deadline = time.monotonic() + timeout_s
    while ends:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {topic} to its end took over {timeout_s} s")
        for message in consumer.consume(1000, 0.2):
            if message.error() is not None:
                continue
            yield message
        # The position, not the last message: it moves past transaction markers too.
        for tp in consumer.position([TopicPartition(topic, p) for p in ends]):
            if tp.offset >= 0:
                positions[tp.partition] = tp.offset
            if positions.get(tp.partition, 0) >= ends[tp.partition]:
                del ends[tp.partition]
    consumer.unassign()


def _watermarks(consumer: Consumer, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """The partition's (low, high) watermarks as its leader reports them. A partition
    or leader the client does not know yet (a leader failing over, a broker that just
    restarted, a client that has not fetched the metadata) is asked again within
    ``timeout_s``."""
    def query(seconds: float) -> tuple[int, int]:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=seconds)
        return int(low), int(high)

    return retry_metadata_pending(query, timeout_s)


class OffsetSyncs:
    """(source offset, target offset) pairs of one source partition, oldest first."""

    def __init__(self) -> None:
        self.source: list[int] = []
        self.target: list[int] = []

    def copy(self) -> OffsetSyncs:
        twin = OffsetSyncs()
        twin.source, twin.target = list(self.source), list(self.target)
        return twin

    def add(self, source_offset: int, target_offset: int) -> None:
        if target_offset < 0:
            return
        if self.source and source_offset <= self.source[-1]:
            # A resumed copy may step back; later pairs describe the target better.
            cut = bisect.bisect_left(self.source, source_offset)
            del self.source[cut:], self.target[cut:]
        self.source.append(source_offset)
        self.target.append(target_offset)
        if len(self.source) > SYNCS_KEPT:
            half = len(self.source) // 2
            self.source[:half] = self.source[:half:2]
            self.target[:half] = self.target[:half:2]

    def translate(self, source_offset: int) -> int | None:
        """The target offset from which a consumer misses nothing at or after
        ``source_offset``: the newest sync at or before it (None when older than all)."""
        i = bisect.bisect_right(self.source, source_offset) - 1
        return None if i < 0 else self.target[i]

    def sync_before(self, source_offset: int) -> int | None:
        i = bisect.bisect_right(self.source, source_offset) - 1
        return None if i < 0 else self.source[i]


class ProgressStore:
    """Reads and writes the progress and offset-syncs topics. Owns two group-less
    consumers of the target: ``reader`` (read_committed: what committed transactions
    wrote) and ``ends`` (read_uncommitted: high watermarks, which include open
    transactions). Writes go through the producer the caller passes (a transactional one
    with exactly.once)."""

    def __init__(self, target_consumer_config: ClientConfig, topic: str, syncs_topic: str):
        self.topic = topic
        self.syncs_topic = syncs_topic
        common: ClientConfig = {**target_consumer_config, "group.id": "pykfk-mirror-progress-reader",
                                "enable.auto.commit": False, "enable.partition.eof": False}
        self.reader = Consumer({**common, "isolation.level": "read_committed"})
        self.ends = Consumer({**common, "isolation.level": "read_uncommitted"})
        self.entries: dict[tuple[str, int], ProgressEntry] = {}
        # Every sync still in the syncs topic (compaction keeps only the latest), so a
        # process that takes a partition over translates offsets from before its time.
        self.history: dict[tuple[str, int], OffsetSyncs] = {}
        self._positions: dict[int, int] = {}
        self._sync_positions: dict[int, int] = {}

    def catch_up(self, timeout_s: float = READ_TIMEOUT_S) -> None:
        """Apply everything committed to both topics before this call (by any process);
        waits for transactions open in them to end, at most ``timeout_s``."""
        for message in read_compacted(self.reader, self.topic, self._positions, timeout_s, self.ends):
            value, key = message.value(), message.key()
            if value is None or key is None:
                continue
            topic, partition = json.loads(key)
            self.entries[(topic, int(partition))] = ProgressEntry.decode(value)
        for message in read_compacted(self.reader, self.syncs_topic, self._sync_positions, timeout_s, self.ends):
            value, key = message.value(), message.key()
            if value is None or key is None:
                continue
            topic, partition = json.loads(key)
            doc = json.loads(value)
            self.history.setdefault((topic, int(partition)), OffsetSyncs()).add(
                int(doc["upstream_offset"]), int(doc["downstream_offset"]))

    def write(self, producer: Producer, topic: str, partition: int, entry: ProgressEntry) -> None:
        """Queue one entry on ``producer``; the caller flushes (or commits)."""
        producer.produce(self.topic, entry.encode(), progress_key(topic, partition))

    def write_sync(self, producer: Producer, topic: str, partition: int, upstream: int, downstream: int) -> None:
        """Queue one offset sync on ``producer``; the caller flushes (or commits)."""
        producer.produce(self.syncs_topic, encode_sync(upstream, downstream), progress_key(topic, partition))

    def source_start(self, consumer: Consumer, topic: str, partition: int) -> int:
        """The source partition's log start offset (``consumer`` reads the source)."""
        return _watermarks(consumer, topic, partition, READ_TIMEOUT_S)[0]

    def target_end(self, topic: str, partition: int, timeout_s: float = READ_TIMEOUT_S) -> int:
        """The target partition's end (high watermark) as its leader reports it now,
        records of open transactions included: the mirror asks after its own records
        were acknowledged, and records it sends later land at or after this offset."""
        return _watermarks(self.ends, topic, partition, timeout_s)[1]

    def close(self) -> None:
        self.reader.close()
        self.ends.close()
