"""Where the coordinator keeps one ``__consumer_offsets`` partition.

The coordinator never touches files: it appends (key, value) records through an
``OffsetsLog`` and replays them on load. ``LogOffsetsLog`` stores them in a partition
``Log`` as ordinary v2 record batches (what Kafka writes, so tools reading the topic see
Kafka's records); ``MemoryOffsetsLog`` keeps them in a list (unit tests, and brokers
without a data directory). A replicated broker can supply its own implementation whose
``append`` returns once the in-sync replicas have the batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from pykfk.errors import ErrorCode, error_for_core_exception

if TYPE_CHECKING:
    from pykfk.log import Log

OffsetsRecord = tuple[bytes, "bytes | None"]

# What ``read_entries`` says a record is.
PLAIN = 0           # an ordinary commit or group record
TRANSACTIONAL = 1   # an offset committed inside a producer's transaction (TxnOffsetCommit)
COMMIT_MARKER = 2   # the producer's transaction committed (key and value None)
ABORT_MARKER = 3    # the producer's transaction aborted (key and value None)
# (key, value, producer id (-1 for PLAIN), kind)
OffsetsEntry = tuple["bytes | None", "bytes | None", int, int]

def storage_error_code(exc: BaseException, *, commit: bool) -> ErrorCode:
    """What a client gets when the offsets log refused an append (Kafka's mapping in
    GroupMetadataManager.storeGroup / storeOffsets)."""
    code = ErrorCode.KAFKA_STORAGE_ERROR if isinstance(exc, OSError) else error_for_core_exception(exc)
    if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_ENOUGH_REPLICAS,
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR):
        return ErrorCode.NOT_COORDINATOR
    if code in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE, ErrorCode.INVALID_FETCH_SIZE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if commit else ErrorCode.UNKNOWN_SERVER_ERROR
    if code == ErrorCode.REQUEST_TIMED_OUT and not commit:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return code


# Bytes read from the log per step while loading; Kafka's offsets.load.buffer.size default.
LOAD_BUFFER_SIZE = 5 * 1024 * 1024

# Topic configuration Kafka gives __consumer_offsets (GroupCoordinator.offsetsTopicConfigs,
# offsets.topic.segment.bytes default): compacted, never deleted by age, so committed
# offsets live until the coordinator writes their tombstones.
OFFSETS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 100 * 1024 * 1024,
    "compression.type": "producer",
}


class OffsetsLog(Protocol):
    """One ``__consumer_offsets`` partition as the coordinator sees it.

    ``append`` must keep records in call order and return only once they are durable
    (written to the log; replicated where the broker replicates); it raises on failure
    (``pykfk.errors.KafkaError`` or ``OSError``) and then nothing of the call was
    acknowledged. ``read_all`` yields every record from the start, oldest first; a value
    of None is a tombstone.
    """

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> None: ...

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]: ...


class MemoryOffsetsLog:
    """An OffsetsLog in a Python list: nothing survives the process."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.entries: list[OffsetsEntry] = []
        # Set to an exception instance to make the next appends fail (visible for testing).
        self.fail_with: BaseException | None = None

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.records.extend((bytes(k), None if v is None else bytes(v)) for k, v in records)
        self.entries.extend((bytes(k), None if v is None else bytes(v), -1, PLAIN) for k, v in records)

    async def append_transactional(self, records: list[tuple[bytes, bytes | None]], producer_id: int,
                                   producer_epoch: int) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.entries.extend((bytes(k), None if v is None else bytes(v), producer_id, TRANSACTIONAL)
                            for k, v in records)

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        return iter(list(self.records))

    def read_entries(self) -> Iterator[OffsetsEntry]:
        return iter(list(self.entries))


class LogOffsetsLog:
    """An OffsetsLog over a partition ``pykfk.log.Log``.

    Each ``append`` call becomes one uncompressed v2 batch (keys and values as Kafka lays
    them out, create-time timestamp = now), so a commit of many partitions is all-or-nothing.
    ``read_all`` reads the log from its start offset with ``Log.read`` and decodes the
    batches with ``pykfk._core.records.iter_records``.
    """

    def __init__(self, log: Log, *, flush: bool = False) -> None:
        self.log = log
        # Kafka acknowledges offset commits once written (and replicated), without fsync;
        # flush=True adds an fsync per append for a single broker that wants more.
        self.flush = flush

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        from pykfk._core.records import build_batch

        now_ms = int(time.time() * 1000)
        batch = bytearray(build_batch([(k, v, now_ms, ()) for k, v in records]))
        self.log.append(batch)
        if self.flush:
            # Log.flush blocks on fsync: keep it off the event loop.
            await asyncio.get_running_loop().run_in_executor(None, self.log.flush)

    async def append_transactional(self, records: list[tuple[bytes, bytes | None]], producer_id: int,
                                   producer_epoch: int) -> None:
        """One transactional batch of the producer (no sequence numbers: the coordinator
        writes it, as Kafka's does); visible once a COMMIT marker follows."""
        self.log.append(transactional_batch(records, producer_id, producer_epoch, int(time.time() * 1000)))

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        for key, value, _producer_id, kind in self.read_entries():
            if kind in (PLAIN, TRANSACTIONAL) and key is not None:
                yield key, value

    def read_entries(self) -> Iterator[OffsetsEntry]:
        """Every record from the start with what it is: plain, transactional (and whose),
        or the marker ending a producer's transaction."""
        from pykfk._core.records import BATCH_HEADER_SIZE, iter_records, parse_batch_header

        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, LOAD_BUFFER_SIZE)
            region = data.file_region
            if region is None or region.size == 0:
                return
            buf = region.read()
            for record in iter_records(buf):
                if record.offset < offset or record.key is None:
                    continue
                batch = record.batch
                if batch.is_control:
                    kind = _marker_kind(bytes(record.key))
                    if kind is not None:
                        yield None, None, batch.producer_id, kind
                    continue
                value = None if record.value is None else bytes(record.value)
                if batch.is_transactional:
                    yield bytes(record.key), value, batch.producer_id, TRANSACTIONAL
                else:
                    yield bytes(record.key), value, -1, PLAIN
            # Step past whole batches (also those without data records, e.g. control
            # batches); a partial batch at the end of the region is read again next round.
            pos = 0
            next_offset = offset
            while pos + BATCH_HEADER_SIZE <= len(buf):
                header = parse_batch_header(buf, pos)
                if pos + header.size > len(buf):
                    break
                next_offset = max(next_offset, header.last_offset + 1)
                pos += header.size
            if next_offset <= offset:
                return  # nothing complete could be read: stop rather than spin
            offset = next_offset


def _marker_kind(key: bytes) -> int | None:
    """COMMIT_MARKER or ABORT_MARKER from a control record's key (version int16, type
    int16: 0 abort, 1 commit); None for other control records."""
    if len(key) < 4:
        return None
    kind = int.from_bytes(key[2:4], "big", signed=True)
    return {0: ABORT_MARKER, 1: COMMIT_MARKER}.get(kind)


def transactional_batch(records: list[tuple[bytes, bytes | None]], producer_id: int, producer_epoch: int,
                        now_ms: int) -> bytearray:
    """Offsets committed in a producer's transaction as one transactional batch without
    sequence numbers (Kafka's coordinator writes them the same way)."""
    from pykfk._core.records import build_batch

    return bytearray(build_batch([(k, v, now_ms, ()) for k, v in records], producer_id=producer_id,
                                 producer_epoch=producer_epoch, is_transactional=True))
