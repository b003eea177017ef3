"""The mirror's audit counts (pykfk/audit.py has the record format and ``pykfk audit``),
made so that no crash can make them disagree with what the target holds.

A partition's counts (records per window of their timestamps) since its previous
progress write are committed with the progress entry (progress.py, ``audit``): in the
same transaction as the records they count with exactly.once, after the target
acknowledged the records at least once. Only then are they published to the audit
cluster, each range as audit records with a key that depends on nothing but the range:
emitter ``<group.id>:<topic>:<partition>``, sequence number the source offset the range
ends at. A range stays in every later progress entry of its partition until the audit
cluster acknowledged it, and whoever resumes the partition (after a crash, a restart, a
rebalance) publishes the ranges of the last committed entry again: ``pykfk audit``
reads each key once, so a range republished counts once, and a range never committed
(its records aborted or never vouched for) is never published.
"""

from __future__ import annotations

import importlib
import logging
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from pykfk.client.admin import AdminClient
from pykfk.errors import ErrorCode
from pykfk.errors import KafkaError as AdminError
from pykfk.mirror.config import MirrorConfig
from pykfk.mirror.health import ClusterState, client_settings
from pykfk.mirror.progress import AuditRange

__all__ = ["MirrorAudit"]

log = logging.getLogger("pykfk.mirror")

SourcePartition = tuple[str, int]

ADMIN_TIMEOUT_S = 10


class MirrorAudit:
    """Publishes committed audit ranges; keeps each until the audit cluster acknowledged
    every record of it. Not thread-safe: the mirror's loop thread only."""

    def __init__(self, config: MirrorConfig, state: ClusterState):
        assert config.audit_bootstrap
        self.config = config
        self._bootstrap: str = config.audit_bootstrap
        self.state = state
        # pykfk.audit is imported by name: its module brings pykfk's own producer, which
        # the mirror's type checking leaves out.
        self._record_class: Any = importlib.import_module("pykfk.audit").AuditRecord
        common = {"bootstrap.servers": config.audit_bootstrap, **client_settings(state)}
        self._producer = Producer({**common, "enable.idempotence": True, "acks": "all", "linger.ms": 20})
        self._topic_ready = False
        # partition -> range end -> records of the range not acknowledged yet
        self._pending: dict[SourcePartition, dict[int, AuditRange]] = {}
        self._unacked: dict[tuple[SourcePartition, int], int] = {}
        self._resend: list[tuple[SourcePartition, AuditRange]] = []
        self.published = 0

    def pending(self, partition: SourcePartition) -> tuple[AuditRange, ...]:
        """Ranges of ``partition`` the audit cluster has not acknowledged yet."""
        ranges = self._pending.get(partition)
        return tuple(ranges[end] for end in sorted(ranges)) if ranges else ()

    def add(self, partition: SourcePartition, ranges: tuple[AuditRange, ...]) -> None:
        """Publish committed ranges (again, when they come from a progress entry)."""
        for audit_range in ranges:
            if audit_range.end in self._pending.setdefault(partition, {}):
                continue
            self._pending[partition][audit_range.end] = audit_range
            self._resend.append((partition, audit_range))
        self.poll()

    def drop(self, partition: SourcePartition) -> None:
        """The partition went to another process, which publishes what is left."""
        self._pending.pop(partition, None)

    def poll(self) -> None:
        if self._resend and self._ensure_topic():
            todo, self._resend = self._resend, []
            for partition, audit_range in todo:
                if audit_range.end in self._pending.get(partition, {}):
                    self._send(partition, audit_range)
        self._producer.poll(0)

    def close(self, timeout_s: float = 10) -> None:
        self.poll()
        remaining = self._producer.flush(timeout_s)
        if remaining:
            log.warning("audit: %d counts not acknowledged by %s; the next start publishes them",
                        remaining, self.config.audit_bootstrap)

    def _ensure_topic(self) -> bool:
        """Create the audit topic (one partition) unless it exists."""
        if self._topic_ready:
            return True
        if not self.state.ready():
            return False
        try:
            with AdminClient(self._bootstrap, timeout=ADMIN_TIMEOUT_S, client_id="pykfk-mirror") as admin:
                admin.create_topic(self.config.audit_topic, 1, -1, {})
        except AdminError as exc:
            if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                self.state.failed(str(exc))
                return False
        self._topic_ready = True
        self.state.ok()
        return True

    def _send(self, partition: SourcePartition, audit_range: AuditRange) -> None:
        topic, number = partition
        emitter = f"{self.config.group_id}:{topic}:{number}"
        self._unacked[(partition, audit_range.end)] = len(audit_range.windows)
        for window, count in audit_range.windows:
            record = self._record_class(self.config.audit_tier, topic, window, self.config.audit_window_ms,
                                        count, emitter, audit_range.end)
            self._producer.produce(self.config.audit_topic, record.encode(), record.key.encode(),
                                   on_delivery=partial(self._acked, partition, audit_range))

    def _acked(self, partition: SourcePartition, audit_range: AuditRange, error: KafkaError | None,
               message: Message) -> None:
        key = (partition, audit_range.end)
        if key not in self._unacked:
            return
        if error is not None:
            # Sent again as a whole: the records already acknowledged have the same keys.
            del self._unacked[key]
            self._resend.append((partition, audit_range))
            self.state.failed(error.str())
            return
        self._unacked[key] -= 1
        if self._unacked[key] == 0:
            del self._unacked[key]
            self._pending.get(partition, {}).pop(audit_range.end, None)
            self.published += 1
            self.state.ok()
