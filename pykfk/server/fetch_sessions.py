"""Incremental fetch sessions (KIP-227): a consumer or follower of many partitions names
them once; later fetches carry only what changed and get back only what changed.

A request's (session_id, session_epoch) says what it is:

    (0, -1)   a full fetch without a session (every partition in, every partition out)
    (0, 0)    a full fetch that opens a session: the answer carries its id
    (id, -1)  closes session ``id``; the fetch itself is a full one without a session
    (id, n)   an incremental fetch: n must be the session's next epoch; the request's
              partitions are added or updated, ``forgotten_topics_data`` removed, and the
              session's partitions are read

An incremental answer holds only the partitions with records, an error, or a high
watermark, last stable offset or log start offset other than the session last sent.
Errors: FETCH_SESSION_ID_NOT_FOUND for an unknown (or evicted) session,
INVALID_FETCH_SESSION_EPOCH for an epoch out of order; the client then starts a new
session with a full fetch, so nothing is lost.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions (Kafka's
default 1,000). When it is full a new session takes the slot of the least recently used
one, but a consumer's session never evicts a follower's (followers are privileged) and a
session used in the last ``min.incremental.fetch.session.eviction.ms`` is not evicted
for another consumer; with no slot the fetch is answered without a session (session id
0), as Kafka does.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Protocol

from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.protocol import typed

NO_SESSION = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1
# A consumer's session younger than this (since its last use) is not evicted by another
# consumer's new one (the default of Kafka's min.incremental.fetch.session.eviction.ms).
EVICTION_GRACE_MS = 120_000

TopicPartition = tuple[str, int]


class ReadPartition(Protocol):
    """A partition to read, as a Fetch request or a session names it."""

    @property
    def partition(self) -> int: ...
    @property
    def fetch_offset(self) -> int: ...
    @property
    def partition_max_bytes(self) -> int: ...
    @property
    def current_leader_epoch(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...


class ReadTopic(Protocol):
    """A topic to read: a Fetch request's (``typed.FetchTopic``) or a session's."""

    @property
    def topic(self) -> str: ...
    @property
    def partitions(self) -> Sequence[ReadPartition]: ...


@dataclasses.dataclass(slots=True)
class SessionPartition:
    """One partition of a session: what the client last asked (attribute names as in the
    request, so a session is read like a request) and what the broker last answered
    (the ``sent_`` offsets: an incremental answer holds the partition again only with
    records, an error or other offsets; ``pykfk._core.fetch_path.session_answer``)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    # The high watermark a v18 follower last said it knows (KIP-1166); not sent: 2**63-1.
    high_watermark: int = 2**63 - 1
    sent_high_watermark: int = -1
    sent_last_stable_offset: int = -1
    sent_log_start_offset: int = -1


@dataclasses.dataclass(slots=True)
class SessionTopic:
    """A topic of a session as the fetch path reads a request's topics."""

    topic: str
    partitions: list[SessionPartition]


class FetchSession:
    """The partitions a client fetches, in the order it named them."""

    __slots__ = ("_grouped", "epoch", "last_used_ms", "partitions", "privileged", "session_id", "topic_ids")

    def __init__(self, session_id: int, privileged: bool, now_ms: int):
        self.session_id = session_id
        self.epoch = 1  # the epoch the next incremental fetch must carry
        self.privileged = privileged
        self.last_used_ms = now_ms
        self.partitions: OrderedDict[TopicPartition, SessionPartition] = OrderedDict()
        # The id the client knows each topic by (Fetch v13+): a topic deleted and made
        # again under the same name is another topic, never read for the old id.
        self.topic_ids: dict[str, uuid.UUID] = {}
        # ``topics()`` as last grouped: kept until a partition is added or removed (the
        # partitions are updated in place), so an incremental fetch of a session of
        # 10,000 partitions does not regroup them all.
        self._grouped: list[SessionTopic] | None = None

    def update(self, topics: Iterable[typed.FetchTopic],
               forgotten: Iterable[typed.FetchRequestForgottenTopic] = ()) -> None:
        """Add or update the request's partitions, then drop the forgotten ones."""
        for topic in topics:
            for part in topic.partitions:
                key = (topic.topic, part.partition)
                known = self.partitions.get(key)
                if known is None:
                    self._grouped = None
                    self.partitions[key] = SessionPartition(
                        part.partition, part.fetch_offset, part.partition_max_bytes,
                        part.current_leader_epoch, part.log_start_offset, part.high_watermark)
                else:
                    known.fetch_offset = part.fetch_offset
                    known.partition_max_bytes = part.partition_max_bytes
                    known.current_leader_epoch = part.current_leader_epoch
                    known.log_start_offset = part.log_start_offset
                    known.high_watermark = part.high_watermark
        for gone in forgotten:
            for partition in gone.partitions:
                if self.partitions.pop((gone.topic, partition), None) is not None:
                    self._grouped = None

    def topics(self) -> list[SessionTopic]:
        """The session's partitions grouped by topic, for reading (the list is shared
        between calls until the partitions change: not to be modified)."""
        if self._grouped is not None:
            return self._grouped
        grouped: dict[str, SessionTopic] = {}
        for (name, _partition), state in self.partitions.items():
            entry = grouped.get(name)
            if entry is None:
                entry = grouped[name] = SessionTopic(name, [])
            entry.partitions.append(state)
        self._grouped = list(grouped.values())
        return self._grouped

    def next_epoch(self) -> None:
        self.epoch = 1 if self.epoch >= INT32_MAX else self.epoch + 1


class FetchSessionCache:
    """The broker's fetch sessions by id, least recently used first."""

    def __init__(self, slots: int, clock: Clock = SYSTEM_CLOCK, eviction_grace_ms: int = EVICTION_GRACE_MS):
        self.slots = slots
        self.clock = clock
        self.eviction_grace_ms = eviction_grace_ms
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def now_ms(self) -> int:
        return int(self.clock.monotonic() * 1000)

    def get(self, session_id: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            self._sessions.move_to_end(session_id)
            session.last_used_ms = self.now_ms()
        return session

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def create(self, privileged: bool) -> FetchSession | None:
        """A new session, or None when no slot is free and none may be evicted."""
        if self.slots <= 0:
            return None
        now = self.now_ms()
        if len(self._sessions) >= self.slots and not self._evict_one(privileged, now):
            return None
        session_id = self._new_id()
        session = self._sessions[session_id] = FetchSession(session_id, privileged, now)
        return session

    def _evict_one(self, privileged: bool, now_ms: int) -> bool:
        for session_id, session in self._sessions.items():  # least recently used first
            if session.privileged:
                continue
            if privileged or now_ms - session.last_used_ms >= self.eviction_grace_ms:
                del self._sessions[session_id]
                self.evictions += 1
                return True
        return False

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, INT32_MAX)
            if session_id not in self._sessions:
                return session_id
