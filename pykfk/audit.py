"""The audit trail of the 2011 Kafka paper (section 5): every tier of a pipeline counts
the records it handled per topic and fixed time window (by record timestamp) and
publishes the counts to an audit topic; ``compare`` (``pykfk audit``) lines the tiers up
window by window and reports loss and duplicates.

An audit record (the value; JSON so any client can read it):

    {"tier": "producer", "topic": "orders", "window_start": <ms>, "window_ms": 60000,
     "count": 1234, "emitter": "<host>-<pid>-<random>", "seq": 7}

``count`` is what the emitter handled in that window since its previous audit record
(a delta), so the tiers' totals are sums. The key ``<tier>/<emitter>/<seq>`` names one
emission: a record read twice (a retried send, a re-run that publishes the same counts
again) counts once.

Emitters: ``pykfk.producer.Producer(audit=...)`` (records delivered), the mirror
(records it copied into the target, under the source topic's name) and
``pykfk-spark-ingest --audit-bootstrap-servers`` (records it committed to Parquet).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "AUDIT_TOPIC",
    "AuditEmitter",
    "AuditRecord",
    "AuditReport",
    "WindowResult",
    "compare",
    "read_audit_records",
    "window_start",
]

log = logging.getLogger("pykfk.audit")

AUDIT_TOPIC = "__pykfk_audit"
# The paper's audit used 10-minute windows; one minute gives quicker answers and is
# still wide enough that a window rarely straddles a pipeline's latency many times.
DEFAULT_WINDOW_MS = 60_000
DEFAULT_INTERVAL_S = 5.0


def window_start(timestamp_ms: int, window_ms: int) -> int:
    return timestamp_ms - timestamp_ms % window_ms


@dataclass(frozen=True)
class AuditRecord:
    tier: str
    topic: str
    window_start: int
    window_ms: int
    count: int
    emitter: str
    seq: int

    @property
    def key(self) -> str:
        return f"{self.tier}/{self.emitter}/{self.seq}/{self.topic}/{self.window_start}"

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> AuditRecord:
        doc = json.loads(data)
        return cls(str(doc["tier"]), str(doc["topic"]), int(doc["window_start"]),
                   int(doc["window_ms"]), int(doc["count"]), str(doc["emitter"]), int(doc["seq"]))


def new_emitter_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class AuditEmitter:
    """Counts records per (topic, window) and publishes the counts to the audit topic of
    ``bootstrap_servers`` every ``interval_s`` seconds, on ``emit()`` and on ``close()``.

    Thread-safe: ``count*`` may be called from any thread (a producer's sender thread,
    the mirror's loop). Publishing uses a pykfk Producer of its own (acks=all,
    idempotent) on a background thread; counts that could not be published are kept
    and sent again with the next emission.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        tier: str,
        *,
        topic: str = AUDIT_TOPIC,
        window_ms: int = DEFAULT_WINDOW_MS,
        interval_s: float = DEFAULT_INTERVAL_S,
        emitter_id: str | None = None,
        background: bool = True,
    ):
        if window_ms <= 0:
            raise ValueError("window_ms must be positive")
        self.bootstrap_servers = bootstrap_servers
        self.tier = tier
        self.topic = topic
        self.window_ms = window_ms
        self.interval_s = interval_s
        self.emitter_id = emitter_id or new_emitter_id()
        self._counts: dict[tuple[str, int], int] = defaultdict(int)
        self._lock = threading.Lock()
        self._emit_lock = threading.Lock()
        self._seq = 0
        self._producer: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, name="pykfk-audit", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------------ counting

    def count(self, topic: str, timestamp_ms: int, n: int = 1) -> None:
        key = (topic, timestamp_ms - timestamp_ms % self.window_ms)
        with self._lock:
            self._counts[key] += n

    def count_timestamps(self, topic: str, timestamps: Iterable[int]) -> None:
        size = self.window_ms
        local: dict[int, int] = defaultdict(int)
        for ts in timestamps:
            local[ts - ts % size] += 1
        self.add_counts({(topic, w): n for w, n in local.items()})

    def add_counts(self, counts: Mapping[tuple[str, int], int]) -> None:
        """Add counts already grouped by (topic, window start)."""
        with self._lock:
            for key, n in counts.items():
                self._counts[key] += n

    # ------------------------------------------------------------------ publishing

    def emit(self, timeout_s: float = 30.0) -> int:
        """Publish the counts gathered since the last emission; returns how many audit
        records were written. On failure the counts stay for the next try."""
        with self._emit_lock:
            with self._lock:
                counts, self._counts = self._counts, defaultdict(int)
            if not counts:
                return 0
            records = [AuditRecord(self.tier, topic, start, self.window_ms, n, self.emitter_id,
                                   self._seq + i) for i, ((topic, start), n) in enumerate(sorted(counts.items()))]
            try:
                producer = self._get_producer()
                for record in records:
                    producer.send(self.topic, record.encode(), key=record.key.encode())
                producer.flush(timeout_s)
            except Exception:
                self.add_counts(counts)
                raise
            self._seq += len(records)
            return len(records)

    def _get_producer(self) -> Any:
        if self._producer is None:
            from pykfk.producer import Producer

            ensure_audit_topic(self.bootstrap_servers, self.topic)
            self._producer = Producer(self.bootstrap_servers, client_id=f"pykfk-audit-{self.tier}",
                                      linger_ms=0)
        return self._producer

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.emit()
            except Exception as exc:  # noqa: BLE001 - the next round tries again with the same counts
                log.warning("audit emission to %s failed: %s", self.topic, exc)

    def close(self, timeout_s: float = 30.0) -> None:
        """Publish what is left and stop."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        try:
            self.emit(timeout_s)
        finally:
            if self._producer is not None:
                self._producer.close(timeout_s)
                self._producer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ensure_audit_topic(bootstrap_servers: str, topic: str = AUDIT_TOPIC) -> None:
    """Create the audit topic (one partition, the broker's replication factor) unless
    it exists."""
    from pykfk.client.admin import AdminClient
    from pykfk.errors import ErrorCode, KafkaError

    with AdminClient(bootstrap_servers) as admin:
        try:
            admin.create_topic(topic, 1, -1, {})
        except KafkaError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                raise


# ---------------------------------------------------------------------- reading


def read_audit_records(admin: Any, topic: str = AUDIT_TOPIC,
                       max_rounds: int = 100_000) -> Iterator[AuditRecord]:
    """Every audit record in ``topic`` up to its end at the time of the call, each
    emission once. ``admin`` is a ``pykfk.client.admin.AdminClient``."""
    from pykfk._core.records import decode_records
    from pykfk.client.admin import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
    from pykfk.errors import KafkaError, error_code

    leaders = admin.leaders(topic)
    positions = admin.list_offsets(topic, leaders, EARLIEST_TIMESTAMP)
    ends = admin.list_offsets(topic, leaders, LATEST_TIMESTAMP)
    seen: set[str] = set()
    for _ in range(max_rounds):
        todo = {p: o for p, o in positions.items() if o < ends[p]}
        if not todo:
            return
        by_leader: dict[int, dict[int, int]] = defaultdict(dict)
        for p, offset in todo.items():
            by_leader[leaders[p]][p] = offset
        for leader, wanted in by_leader.items():
            for data in admin.fetch(leader, topic, wanted, max_wait_ms=100):
                p = data.partition_index
                if data.error_code:
                    raise KafkaError(error_code(data.error_code), f"fetch {topic}-{p}")
                if not data.records:
                    continue
                decoded = decode_records(data.records, positions[p])
                for record in decoded:
                    if record.value is None:
                        continue
                    audit = AuditRecord.decode(record.value)
                    if audit.key not in seen:
                        seen.add(audit.key)
                        yield audit
                positions[p] = max(positions[p], decoded.next_offset)
    raise TimeoutError(f"{topic} still not read to its end after {max_rounds} fetches")


# ---------------------------------------------------------------------- comparing


@dataclass
class WindowResult:
    """One topic and window: each tier's count, and what each tier lacks or has twice
    compared with the reference tier. ``status``: ok, loss, duplicates, or open (the
    window is too recent to judge)."""

    topic: str
    window_start: int
    window_ms: int
    counts: dict[str, int]
    missing: dict[str, int] = field(default_factory=dict)
    duplicates: dict[str, int] = field(default_factory=dict)
    status: str = "ok"


@dataclass
class AuditReport:
    reference: str
    tiers: list[str]
    windows: list[WindowResult]

    @property
    def has_loss(self) -> bool:
        return any(w.status == "loss" for w in self.windows)

    def summary(self) -> dict[str, int]:
        closed = [w for w in self.windows if w.status != "open"]
        return {
            "windows": len(self.windows),
            "windows_complete": sum(w.status == "ok" for w in closed),
            "windows_open": len(self.windows) - len(closed),
            "windows_with_loss": sum(bool(w.missing) for w in closed),
            "windows_with_duplicates": sum(bool(w.duplicates) for w in closed),
            "missing": sum(sum(w.missing.values()) for w in closed),
            "duplicates": sum(sum(w.duplicates.values()) for w in closed),
        }

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "tiers": self.tiers, "summary": self.summary(),
                "windows": [asdict(w) for w in self.windows]}


def compare(records: Iterable[AuditRecord], *, reference: str = "producer",
            tiers: Sequence[str] | None = None, topics: Sequence[str] | None = None,
            settle_ms: int = 60_000, now_ms: int | None = None) -> AuditReport:
    """Line the tiers up window by window. A window is judged once it ended at least
    ``settle_ms`` before ``now_ms`` (records still on their way are not loss); a tier
    with fewer records than ``reference`` lost them, one with more has duplicates."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    totals: dict[tuple[str, int, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    seen_tiers: set[str] = set()
    for r in records:
        if topics and r.topic not in topics:
            continue
        seen_tiers.add(r.tier)
        totals[(r.topic, r.window_start, r.window_ms)][r.tier] += r.count
    compared = list(tiers) if tiers else sorted(seen_tiers - {reference})
    windows = []
    for (topic, start, size), counts in sorted(totals.items()):
        result = WindowResult(topic, start, size, {t: counts.get(t, 0) for t in [reference, *compared]})
        expected = counts.get(reference, 0)
        for tier in compared:
            diff = counts.get(tier, 0) - expected
            if diff < 0:
                result.missing[tier] = -diff
            elif diff > 0:
                result.duplicates[tier] = diff
        if start + size + settle_ms > now_ms:
            result.status = "open"
        elif result.missing:
            result.status = "loss"
        elif result.duplicates:
            result.status = "duplicates"
        windows.append(result)
    return AuditReport(reference, compared, windows)
