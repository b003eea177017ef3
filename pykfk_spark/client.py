"""The small blocking Kafka client the Spark source needs: topic and leader lookup,
ListOffsets (earliest, latest, by timestamp) on the driver, and range fetches from the
partition leader in the Python workers. Built on pykfk.client's BrokerConnection and
ClusterMetadata (plain sockets, no asyncio, no broker objects).

Fetch is used at v11 at most (the last non-flexible version, what pykfk's clients speak);
a response may end inside a batch, which decode_records drops (the next fetch starts at
its base offset). Kafka error codes: apache/kafka Errors.java.

Isolation (KIP-98): read_committed asks ListOffsets and Fetch with isolation_level 1, so
"latest" is the last stable offset and fetches stop there; the records of aborted
transactions still come back, and are left out with the Fetch response's
aborted_transactions list (``skipped_batches``). Control batches (transaction markers)
are never records, in either mode. The offsets they and aborted batches occupy stay part
of the ranges read, so ranges remain contiguous.
"""

from __future__ import annotations

import re
import struct
import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from pykfk._core.records import decode_records
from pykfk.client.cluster_view import REFRESH_ERRORS, ClusterMetadata
from pykfk.client.connection import BrokerConnection, ConnectionError_
from pykfk.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from typing_extensions import Self

FETCH = 1
LIST_OFFSETS = 2

LATEST = -1  # ListOffsets special timestamps (ListOffsetsRequest.json)
EARLIEST = -2

READ_UNCOMMITTED = 0  # isolation_level of ListOffsets (v2+) and Fetch (v4+)
READ_COMMITTED = 1

# A control record's key: version int16, type int16 (0 abort, 1 commit), big-endian.
CONTROL_KEY = struct.Struct(">hh")
ABORT_MARKER = 0

# Attempts at a request that failed with a retriable error (leader moved, connection
# lost) before giving up; the backoff doubles from RETRY_BACKOFF up to 1 s.
MAX_ATTEMPTS = 8
RETRY_BACKOFF = 0.05


class DataLossError(KafkaError):
    """Records a query was planned to read are gone (deleted by retention, or the log was
    truncated); raised when ``failOnDataLoss`` is true, as Spark's Kafka source does."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, message)


TopicPartition = tuple[str, int]


class OffsetClient:
    """Driver-side lookups for planning: which partitions a subscription covers, who leads
    them, and their offsets. With ``read_committed``, LATEST is the last stable offset
    (the first offset of the earliest open transaction, else the high watermark). Not
    thread-safe; close() when done."""

    def __init__(
        self,
        bootstrap_servers: str,
        *,
        client_id: str = "pykfk-spark",
        request_timeout_ms: int = 30000,
        read_committed: bool = False,
    ):
        self.bootstrap_servers = bootstrap_servers
        self.isolation_level = READ_COMMITTED if read_committed else READ_UNCOMMITTED
        self.cluster = ClusterMetadata(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms
        )

    def close(self) -> None:
        self.cluster.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ topics

    def partitions(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        assign: dict[str, list[int]] | None = None,
    ) -> list[TopicPartition]:
        """The partitions of ``topics`` (each must exist), of every topic whose whole name
        matches ``pattern`` (Java's Matcher.matches, as Spark's subscribePattern), or the
        ``assign`` mapping as given (checked to exist)."""
        if pattern is not None:
            regex = re.compile(pattern)
            self.cluster.refresh(None)
            names = [t for t in sorted(self.cluster.topics) if regex.fullmatch(t)]
            return [(t, p) for t in names for p in self.cluster.topics[t].partitions]
        if assign is not None:
            out = []
            for topic, parts in sorted(assign.items()):
                known = set(self.cluster.topic(topic).partitions)
                missing = sorted(set(parts) - known)
                if missing:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has no partition {missing}"
                    )
                out += [(topic, p) for p in sorted(set(parts))]
            return out
        out = []
        for topic in topics:
            out += [(topic, p) for p in self.cluster.topic(topic).partitions]
        return out

    def leader_address(self, topic: str, partition: int) -> tuple[str, int]:
        node = self.cluster.leader(topic, partition)
        address = self.cluster.brokers.get(node)
        if address is None:
            raise KafkaError(
                ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}[{partition}]: leader {node} unknown"
            )
        return address

    # ----------------------------------------------------------------- offsets

    def list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets for each partition: EARLIEST (-2), LATEST (-1, the high watermark) or
        a timestamp in ms, answered with the first offset whose record timestamp is >= it, or
        -1 when no record is that late. Asked of each partition's leader, with retries."""
        result: dict[TopicPartition, int] = {}
        pending = dict(timestamps)
        delay = RETRY_BACKOFF
        for attempt in range(MAX_ATTEMPTS):
            if not pending:
                break
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in pending:
                by_leader.setdefault(self.cluster.leader(*tp), []).append(tp)
            retry = False
            for node, tps in by_leader.items():
                try:
                    answered = self._list_offsets_at(node, {tp: pending[tp] for tp in tps})
                except ConnectionError_:
                    retry = True
                    continue
                for tp, (code, offset) in answered.items():
                    if code == ErrorCode.NONE:
                        result[tp] = offset
                        del pending[tp]
                    elif code in REFRESH_ERRORS:
                        retry = True
                    else:
                        raise KafkaError(code, f"ListOffsets {tp[0]}[{tp[1]}]")
            if pending and attempt < MAX_ATTEMPTS - 1:
                if retry:
                    self.cluster.refresh([t for t, _ in pending])
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        if pending:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"no offsets for {sorted(pending)}")
        return result

    def _list_offsets_at(
        self, node: int, timestamps: dict[TopicPartition, int]
    ) -> dict[TopicPartition, tuple[int, int]]:
        conn = self.cluster.connection(node)
        version = conn.version_for(LIST_OFFSETS)
        if version < (2 if self.isolation_level == READ_COMMITTED else 1):
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                "ListOffsets v1+ needed (v2+ for read_committed)",
            )
        topics: dict[str, list[dict]] = {}
        for (topic, partition), ts in timestamps.items():
            topics.setdefault(topic, []).append({"partition_index": partition, "timestamp": ts})
        body = {
            "replica_id": -1,
            "isolation_level": self.isolation_level,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        response = conn.request(LIST_OFFSETS, body, version=version)
        return {
            (t.name, p.partition_index): (p.error_code, p.offset)
            for t in response.topics
            for p in t.partitions
        }

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: EARLIEST for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: LATEST for tp in tps})


# ------------------------------------------------------------------ worker side

# Python workers are reused across tasks (spark.python.worker.reuse), so connections to
# leaders are kept per worker process and reused by later tasks.
_connections: dict[tuple[str, int], BrokerConnection] = {}
_connections_lock = threading.Lock()


def _connection(address: tuple[str, int], client_id: str, timeout: float) -> BrokerConnection:
    with _connections_lock:
        conn = _connections.get(address)
        if conn is None or not conn.connected:
            conn = BrokerConnection(
                address[0],
                address[1],
                client_id=client_id,
                connect_timeout=timeout,
                request_timeout=timeout,
            )
            _connections[address] = conn
    return conn.connect()


def _drop_connection(address: tuple[str, int]) -> None:
    with _connections_lock:
        conn = _connections.pop(address, None)
    if conn is not None:
        conn.close()


class Chunk(NamedTuple):
    """What one fetch gave: its decoded batches, and per batch 1 where the batch's
    records are not to be read (a marker, or an aborted transaction's data) or None when
    every record is."""

    records: Any  # pykfk._core.records.DecodedRecords
    skipped_batches: array | None


def skipped_batches(decoded: Any, aborted: Sequence[Any]) -> array | None:
    """Per batch of ``decoded`` (decoded with include_control), 1 where a read_committed
    consumer skips it, else 0; None when it skips none.

    ``aborted``: the Fetch response's aborted_transactions (producer_id, first_offset).
    As KIP-98's consumer: walking the batches in offset order, an aborted transaction
    becomes active for its producer once a batch ends at or after its first offset; a
    transactional batch of a producer with an active aborted transaction is skipped,
    and that producer's ABORT marker ends it. Control batches are always skipped.
    """
    pending = sorted((txn.first_offset, txn.producer_id) for txn in aborted)
    active: set[int] = set()
    flags = array("b", bytes(len(decoded.batches)))
    next_txn = 0
    any_skipped = False
    for k, batch in enumerate(decoded.batches):
        if batch.producer_id >= 0:
            last = batch.last_offset
            while next_txn < len(pending) and pending[next_txn][0] <= last:
                active.add(pending[next_txn][1])
                next_txn += 1
        if batch.is_control:
            flags[k], any_skipped = 1, True
            if batch.producer_id in active and _control_type(decoded, batch) == ABORT_MARKER:
                active.discard(batch.producer_id)
        elif batch.is_transactional and batch.producer_id in active:
            flags[k], any_skipped = 1, True
    return flags if any_skipped else None


def _control_type(decoded: Any, batch: Any) -> int:
    """The marker type of a control batch (its one record's key), -1 when unreadable."""
    i = bisect_left(decoded.offsets, batch.base_offset)
    if i == len(decoded) or decoded.offsets[i] > batch.last_offset:
        return -1
    key = decoded.key(i)
    if key is None or len(key) < CONTROL_KEY.size:
        return -1
    return CONTROL_KEY.unpack_from(key)[1]


class RangeFetcher:
    """Reads offsets [start, end) of one partition from its leader, as Chunks of whole
    batches. One fetch request is kept in flight while the caller works on the previous
    chunk.

    ``read_committed``: fetch with isolation_level 1 (up to the last stable offset) and
    mark the batches of aborted transactions in each Chunk's ``skipped_batches``.

    ``leader``: the address the planner saw leading; on NOT_LEADER_OR_FOLLOWER (or a lost
    connection) the leader is looked up again through ``bootstrap_servers``.
    ``fail_on_data_loss``: when records in the range are gone (retention, truncation),
    raise DataLossError; otherwise skip to what is left, as Spark's failOnDataLoss=false.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        partition: int,
        start: int,
        end: int,
        *,
        leader: tuple[str, int] | None = None,
        fetch_max_bytes: int = 8 << 20,
        fail_on_data_loss: bool = True,
        client_id: str = "pykfk-spark",
        request_timeout_ms: int = 30000,
        max_wait_ms: int = 500,
        read_committed: bool = False,
    ):
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.leader = leader
        self.fetch_max_bytes = fetch_max_bytes
        self.fail_on_data_loss = fail_on_data_loss
        self.client_id = client_id
        self.timeout = request_timeout_ms / 1000
        self.max_wait_ms = max_wait_ms
        self.isolation_level = READ_COMMITTED if read_committed else READ_UNCOMMITTED
        self.lost = 0  # offsets skipped because their records were gone (failOnDataLoss off)

    def _request_body(self, offset: int) -> dict:
        return {
            "replica_id": -1,
            "max_wait_ms": self.max_wait_ms,
            "min_bytes": 1,
            "max_bytes": self.fetch_max_bytes,
            "isolation_level": self.isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": self.topic,
                    "partitions": [
                        {
                            "partition": self.partition,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": self.fetch_max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }

    def _find_leader(self) -> tuple[str, int]:
        with OffsetClient(self.bootstrap_servers, client_id=self.client_id) as client:
            client.cluster.refresh([self.topic])
            return client.leader_address(self.topic, self.partition)

    def _bounds(self) -> tuple[int, int]:
        with OffsetClient(self.bootstrap_servers, client_id=self.client_id) as client:
            tp = (self.topic, self.partition)
            return client.earliest([tp])[tp], client.latest([tp])[tp]

    def _send(self, conn: BrokerConnection, offset: int) -> Any:
        version = conn.version_for(FETCH, 11)
        if version < 4 and self.isolation_level == READ_COMMITTED:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "read_committed needs Fetch v4+")
        return conn.send(FETCH, self._request_body(offset), version=version)

    def _decode(self, part: Any, offset: int) -> Chunk:
        """The response's batches from ``offset``; under read_committed with aborted
        transactions listed, markers are decoded too so that aborts can end."""
        aborted = part.aborted_transactions if self.isolation_level == READ_COMMITTED else None
        if not aborted:
            return Chunk(decode_records(part.records or b"", offset), None)
        decoded = decode_records(part.records or b"", offset, include_control=True)
        return Chunk(decoded, skipped_batches(decoded, aborted))

    def __iter__(self) -> Iterator[Chunk]:
        offset = self.start
        attempts = 0
        delay = RETRY_BACKOFF
        stalled_since: float | None = None
        entry = None
        while offset < self.end:
            try:
                if self.leader is None:
                    self.leader = self._find_leader()
                conn = _connection(self.leader, self.client_id, self.timeout)
                if entry is None:
                    entry = self._send(conn, offset)
                response = conn.receive(entry)
                entry = None
                part = response.responses[0].partitions[0]
                code = part.error_code
                if code == ErrorCode.NONE:
                    chunk = self._decode(part, offset)
                    decoded = chunk.records
                    if decoded.next_offset > offset:
                        attempts, delay, stalled_since = 0, RETRY_BACKOFF, None
                        next_offset = decoded.next_offset
                        if next_offset < self.end:
                            entry = self._send(conn, next_offset)  # overlaps the caller's work
                        offset = next_offset
                        if len(decoded):
                            yield chunk
                        continue
                    # Nothing at `offset` although the plan said records were there.
                    stalled_since = stalled_since or time.monotonic()
                    offset = self._stalled(offset, part.high_watermark, stalled_since)
                    time.sleep(RETRY_BACKOFF)
                    continue
                if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    offset = self._out_of_range(offset)
                    continue
                if code not in REFRESH_ERRORS:
                    raise KafkaError(code, f"Fetch {self.topic}[{self.partition}] at {offset}")
                self.leader = None  # leadership moved or the partition is not ready yet
            except ConnectionError_:
                if self.leader is not None:
                    _drop_connection(self.leader)
                self.leader = None
                entry = None
            except KafkaError as exc:
                # e.g. LEADER_NOT_AVAILABLE while looking the leader up: try again
                if isinstance(exc, DataLossError) or not exc.retriable:
                    raise
                self.leader = None
                entry = None
            attempts += 1
            if attempts >= MAX_ATTEMPTS:
                raise KafkaError(
                    ErrorCode.LEADER_NOT_AVAILABLE,
                    f"cannot fetch {self.topic}[{self.partition}] at {offset}",
                )
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _out_of_range(self, offset: int) -> int:
        earliest, latest = self._bounds()
        if offset < earliest:
            if self.fail_on_data_loss:
                raise DataLossError(
                    f"{self.topic}[{self.partition}]: offsets {offset}..{earliest - 1} were deleted "
                    f"(log now starts at {earliest}); set failOnDataLoss=false to skip them"
                )
            self.lost += min(earliest, self.end) - offset
            return min(earliest, self.end)
        if self.fail_on_data_loss:
            raise DataLossError(
                f"{self.topic}[{self.partition}]: offset {offset} is beyond the log end {latest} "
                f"(the log was truncated); set failOnDataLoss=false to skip"
            )
        self.lost += self.end - offset
        return self.end

    def _stalled(self, offset: int, high_watermark: int, since: float) -> int:
        """The leader had no records at ``offset`` < end: wait for them (a leader that is
        catching up) up to the request timeout, then treat them as lost."""
        if time.monotonic() - since <= self.timeout:
            return offset
        if self.fail_on_data_loss:
            raise DataLossError(
                f"{self.topic}[{self.partition}]: offsets {offset}..{self.end - 1} were planned "
                f"but the leader has none of them (high watermark {high_watermark})"
            )
        self.lost += self.end - offset
        return self.end
