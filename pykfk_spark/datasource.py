"""The ``pykfk`` PySpark data source (pyspark.sql.datasource, Spark 4): batch and
streaming reads of topics, and writes of DataFrames to a topic.

Where code runs: ``DataSource``, the readers' planning methods (``partitions``, the
stream's offset methods) and the writer's ``commit``/``abort`` run on the driver; the
readers' ``read`` and the writer's ``write`` run in Python worker processes, which get
the reader/writer object pickled by reference to this module (so it must be importable
there: see PACKAGING.txt). Readers therefore hold only parsed options, and open
connections inside ``read``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .arrow import KAFKA_SCHEMA_DDL, KAFKA_SCHEMA_DDL_NO_HEADERS
from .client import OffsetClient
from .options import OptionError, ReadOptions, WriteOptions, offsets_from_json, offsets_json
from .planner import (
    OffsetRange,
    TopicPartition,
    plan_batch,
    resolve_offsets,
    split_ranges,
    subscribed_partitions,
)

SOURCE_NAME = "pykfk"


class KafkaDataSource(DataSource):
    """``spark.read.format("pykfk")``, ``spark.readStream.format("pykfk")`` and
    ``df.write.format("pykfk")``; options as Spark's Kafka integration (see options.py).

    Schema: key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, headers array<struct<key:string,value:binary>>
    (headers left out with includeHeaders=false).
    """

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "true")).strip().lower() != "false"
        return KAFKA_SCHEMA_DDL if include else KAFKA_SCHEMA_DDL_NO_HEADERS

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(ReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(ReadOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> KafkaWriter:
        if overwrite:
            raise OptionError("a topic cannot be overwritten; use mode('append')")
        return KafkaWriter(WriteOptions.parse(self.options), schema)


def read_range(options: ReadOptions, part: OffsetRange) -> Iterator[Any]:
    """Worker side: pyarrow RecordBatches of the records in ``part``, fetched from the
    partition leader and decoded by the compiled core (read_committed: without markers
    and aborted transactions)."""
    from .arrow import to_record_batch
    from .client import RangeFetcher

    fetcher = RangeFetcher(
        options.bootstrap_servers,
        part.topic,
        part.partition,
        part.start,
        part.end,
        leader=part.leader,
        fetch_max_bytes=options.fetch_max_bytes,
        fail_on_data_loss=options.fail_on_data_loss,
        client_id=options.client_id,
        request_timeout_ms=options.request_timeout_ms,
        read_committed=options.read_committed,
    )
    for chunk in fetcher:
        batch = to_record_batch(
            chunk.records,
            part.topic,
            part.partition,
            part.end,
            include_headers=options.include_headers,
            skipped_batches=chunk.skipped_batches,
        )
        if batch.num_rows:
            yield batch


class KafkaBatchReader(DataSourceReader):
    """Plans offset ranges on the driver (ListOffsets), reads them in the workers."""

    def __init__(self, options: ReadOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        return plan_batch(self.options)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # With no ranges planned, Spark still runs one task with a placeholder partition.
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(self.options, partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over offsets ``{"topic": {"partition": offset}}`` (Spark's Kafka
    offset JSON), kept by Spark in the query's checkpoint.

    ``maxOffsetsPerTrigger`` caps a micro-batch (split across partitions in proportion to
    their lag, as Spark's Kafka source). Under ``Trigger.AvailableNow`` the latest offsets
    are fixed when the query starts, and the query ends once it has read up to them.
    Partitions that appear later (new topics matching subscribePattern, added partitions)
    are read from their earliest offset. With ``kafka.isolation.level=read_committed`` the
    latest offsets are last stable offsets: a micro-batch ends before a transaction still
    open, and the next one starts there.
    """

    def __init__(self, options: ReadOptions):
        self.options = options
        self._client: OffsetClient | None = None
        self._target: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict:
        # Only the options travel to the workers; the driver's client and target stay.
        return {"options": self.options, "_client": None, "_target": None}

    @property
    def client(self) -> OffsetClient:
        if self._client is None:
            self._client = OffsetClient(
                self.options.bootstrap_servers,
                client_id=self.options.client_id,
                request_timeout_ms=self.options.request_timeout_ms,
                read_committed=self.options.read_committed,
            )
        return self._client

    def _bounds(self) -> tuple[list[TopicPartition], dict, dict]:
        client = self.client
        tps = subscribed_partitions(client, self.options)
        return tps, client.earliest(tps), client.latest(tps)

    def initialOffset(self) -> dict:
        tps, earliest, latest = self._bounds()
        start = resolve_offsets(
            self.client,
            self.options.starting,
            tps,
            ending=False,
            options=self.options,
            earliest=earliest,
            latest=latest,
        )
        return offsets_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps, _, latest = self._bounds()
        self._target = {tp: latest[tp] for tp in tps}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        if self._target is not None:
            latest = dict(self._target)
            earliest = self.client.earliest([tp for tp in latest if tp not in begin])
        else:
            _, earliest, latest = self._bounds()
        # A partition first seen now starts at its earliest offset.
        begin = {tp: begin.get(tp, earliest.get(tp, 0)) for tp in latest}
        end = {tp: max(latest[tp], begin[tp]) for tp in latest}
        if isinstance(limit, ReadMaxRows):
            end = rate_limit(begin, end, limit.max_rows)
        return offsets_json(end)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin = offsets_from_json(start)
        stop = offsets_from_json(end)
        new = [tp for tp in stop if tp not in begin]
        if new:
            begin.update(self.client.earliest(new))
        ranges = [
            OffsetRange(tp[0], tp[1], begin[tp], stop[tp], self.client.leader_address(*tp))
            for tp in sorted(stop)
            if stop[tp] > begin[tp]
        ]
        return split_ranges(ranges, self.options.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # With no ranges planned, Spark still runs one task with a placeholder partition.
        if not isinstance(partition, OffsetRange):
            return iter(())
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in the query's checkpoint (offsets/ and commits/),
        which is what a restarted query resumes from."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def rate_limit(
    begin: dict[TopicPartition, int], end: dict[TopicPartition, int], max_rows: int
) -> dict[TopicPartition, int]:
    """``end`` cut so that at most about ``max_rows`` offsets are read, each partition
    getting a share proportional to its lag (at least one offset when it has any)."""
    lag = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(lag.values())
    if total <= max_rows:
        return end
    out = {}
    for tp, size in lag.items():
        share = max_rows * size / total
        out[tp] = begin[tp] + min(size, int(share) if share >= 1 else (1 if size else 0))
    return out


@dataclass
class WriteCommit(WriterCommitMessage):
    records: int
    partitions_written: int


class KafkaWriter(DataSourceArrowWriter):
    """Sends a DataFrame's rows as records: columns ``value`` (binary or string,
    required), ``key`` (binary or string), ``topic`` (string; the ``topic`` option wins
    over it, as in Spark), ``partition`` (int; null or absent: the default partitioner,
    murmur2 of the key as the Java client), ``headers`` (array<struct<key:string,
    value:binary>>). Each task uses pykfk's idempotent Producer with acks=all and waits
    for every record before reporting success: rows of a failed task may be written
    twice when Spark retries it (at-least-once, as Spark's Kafka sink)."""

    def __init__(self, options: WriteOptions, schema: StructType):
        names = set(schema.fieldNames())
        if "value" not in names:
            raise OptionError("the DataFrame needs a value column to write to Kafka")
        if options.topic is None and "topic" not in names:
            raise OptionError("set the topic option or give the DataFrame a topic column")
        self.options = options
        self.columns = [c for c in ("key", "value", "topic", "partition", "headers") if c in names]

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        from pykfk.producer import Producer

        opts = self.options
        errors: list[BaseException] = []

        def on_delivery(_metadata: Any, exc: Exception | None) -> None:
            if exc is not None and not errors:
                errors.append(exc)

        count = 0
        partitions: set[tuple[str, int | None]] = set()
        producer = Producer(
            opts.bootstrap_servers,
            client_id=opts.client_id,
            acks=opts.acks,
            compression_type=opts.compression_type,
            linger_ms=opts.linger_ms,
            batch_size=opts.batch_size,
            callback=on_delivery,
        )
        try:
            for batch in iterator:
                columns = {
                    name: _column_values(batch.column(name), as_bytes=name in ("key", "value"))
                    for name in self.columns
                }
                n = batch.num_rows
                keys = columns.get("key") or [None] * n
                values = columns["value"]
                topics = columns.get("topic") or [None] * n
                parts = columns.get("partition") or [None] * n
                headers = columns.get("headers") or [None] * n
                for i in range(n):
                    topic = opts.topic or topics[i]
                    if not topic:
                        raise OptionError("a row has a null topic and no topic option is set")
                    hdrs = headers[i]
                    producer.send(
                        topic,
                        values[i],
                        key=keys[i],
                        partition=parts[i],
                        headers=[(h["key"], h["value"]) for h in hdrs] if hdrs else None,
                    )
                    partitions.add((topic, parts[i]))
                count += n
                if errors:
                    break
            producer.flush()
        finally:
            producer.close()
        if errors:
            raise errors[0]
        return WriteCommit(count, len(partitions))


def _column_values(column: Any, *, as_bytes: bool) -> list:
    """Python values of a column; with ``as_bytes``, strings become their UTF-8 bytes."""
    import pyarrow as pa

    if as_bytes and (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        column = column.cast(pa.binary())
    return column.to_pylist()
