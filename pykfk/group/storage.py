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

if TYPE_CHECKING:
    from pykfk.log import Log

OffsetsRecord = tuple[bytes, "bytes | None"]

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
        # Set to an exception instance to make the next appends fail (visible for testing).
        self.fail_with: BaseException | None = None

    async def append(self, records: list[tuple[bytes, bytes | None]]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.records.extend((bytes(k), None if v is None else bytes(v)) for k, v in records)

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        return iter(list(self.records))


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

    def read_all(self) -> Iterator[tuple[bytes, bytes | None]]:
        from pykfk._core.records import BATCH_HEADER_SIZE, iter_records, parse_batch_header

        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, LOAD_BUFFER_SIZE)
            region = data.file_region
            if region is None or region.size == 0:
                return
            buf = region.read()
            for record in iter_records(buf):
                if record.offset < offset or record.key is None or record.batch.is_control:
                    continue
                yield bytes(record.key), None if record.value is None else bytes(record.value)
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
