"""A thread that keeps asking each partition's current leader for its last stable offset
(ListOffsets, isolation_level 1 = read_committed, timestamp -1 = latest) while a test kills
brokers, so the test can check that the LSO a partition reports never moves backwards.

Leadership is followed through Metadata from any broker that answers; every socket
operation has a short timeout, so a dead broker costs one failed sample, never a hang.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient

LIST_OFFSETS_VERSION = 5  # current_leader_epoch and leader_epoch, not flexible
METADATA_VERSION = 7  # partition leader epochs
LATEST = -1
READ_COMMITTED = 1


@dataclass
class Sample:
    at: float  # time.monotonic()
    partition: int
    broker: int
    leader_epoch: int  # the epoch the sampler sent (from Metadata), -1 when unknown
    error: int  # the ListOffsets error code; -1 when the broker did not answer in time
    lso: int
    took: float = 0.0  # seconds the broker took to answer (or to fail)


@dataclass
class LsoSampler:
    """``LsoSampler(brokers, topic, partitions)`` with ``brokers`` as {id: (host, port)};
    start() runs the thread, stop() ends it and returns the samples in order."""

    brokers: dict[int, tuple[str, int]]
    topic: str
    partitions: int
    timeout_s: float = 2.0
    interval_s: float = 0.01
    samples: list[Sample] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _clients: dict[int, RawClient] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> LsoSampler:
        self._thread = threading.Thread(target=self._run, name="lso-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s * 4 + 5)
            assert not self._thread.is_alive(), "the LSO sampler did not stop"
        for client in self._clients.values():
            client.close()
        self._clients.clear()
        return self.samples

    def good(self, partition: int) -> list[Sample]:
        return [s for s in self.samples if s.partition == partition and s.error == ErrorCode.NONE]

    def regressions(self) -> list[tuple[Sample, Sample]]:
        """Consecutive answered samples of one partition where the LSO went down."""
        found = []
        for p in range(self.partitions):
            answered = self.good(p)
            found += [(a, b) for a, b in itertools.pairwise(answered) if b.lso < a.lso]
        return found

    # -- the thread ----------------------------------------------------------------------

    def _client(self, broker: int) -> RawClient:
        client = self._clients.get(broker)
        if client is None:
            host, port = self.brokers[broker]
            client = self._clients[broker] = RawClient(host, port, timeout=self.timeout_s)
        return client

    def _call(self, broker: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """The answer, or None when the broker is down or too slow (the connection is
        dropped then: a late answer must not be read as the next one's)."""
        try:
            return self._client(broker).call(api_key, version, body)
        except (OSError, ConnectionError, AssertionError):
            client = self._clients.pop(broker, None)
            if client is not None:
                client.close()
            return None

    def _leaders(self) -> dict[int, tuple[int, int]]:
        """partition -> (leader id, leader epoch), from the first broker that answers."""
        for broker in self.brokers:
            answer = self._call(broker, 3, METADATA_VERSION,
                                {"topics": [{"name": self.topic}], "allow_auto_topic_creation": False})
            if answer is None or not answer.topics or answer.topics[0].error_code != ErrorCode.NONE:
                continue
            return {p.partition_index: (p.leader_id, p.leader_epoch) for p in answer.topics[0].partitions
                    if p.leader_id in self.brokers}
        return {}

    def _sample(self, partition: int, leader: int, epoch: int) -> None:
        started = time.monotonic()
        body = {"replica_id": -1, "isolation_level": READ_COMMITTED, "topics": [{"name": self.topic, "partitions": [
            {"partition_index": partition, "current_leader_epoch": epoch, "timestamp": LATEST}]}]}
        answer = self._call(leader, 2, LIST_OFFSETS_VERSION, body)
        if answer is None:
            self.samples.append(Sample(started, partition, leader, epoch, -1, -1, time.monotonic() - started))
            return
        part = answer.topics[0].partitions[0]
        self.samples.append(Sample(started, partition, leader, epoch, int(part.error_code), int(part.offset),
                                   time.monotonic() - started))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                leaders = self._leaders()
                for partition in range(self.partitions):
                    if partition in leaders:
                        self._sample(partition, *leaders[partition])
                self._stop.wait(self.interval_s)
        except Exception as exc:  # noqa: BLE001 - reported to the test through failures
            self.failures.append(repr(exc))

