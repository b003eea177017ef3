"""spark.read / readStream / write with format("pykfk") against a broker process.

The batch tests share one topic of 1M records over 8 partitions whose contents are a
function of (partition, offset), so every row Spark returns is checked in SQL against
what was produced, without collecting a million rows into Python.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pyarrow.compute as pc
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from spark_helpers import create_topic, produce

from pykfk.client.partitioner import partition_for_key

pytestmark = pytest.mark.slow  # a Spark session, broker processes, seconds per test

T0 = 1_700_000_000_000  # timestamp of offset 0; offset n is stamped T0 + 10 n ms
PARTITIONS = 8
PER_PARTITION = 125_000
TOPIC = "million"


def records_for(partition: int, first: int, n: int) -> list[tuple]:
    """Offsets first..first+n-1 of a partition: key null every 97th offset, one header
    every 10th."""
    return [
        (
            None if off % 97 == 0 else b"%d:%d" % (partition, off),
            b"value-%d-%d" % (partition, off),
            T0 + 10 * off,
            [("n", b"%d" % off)] if off % 10 == 0 else None,
        )
        for off in range(first, first + n)
    ]


ROW_IS_RIGHT = f"""coalesce(
    (CASE WHEN offset % 97 = 0 THEN key IS NULL
          ELSE key = CAST(concat(partition, ':', offset) AS BINARY) END)
    AND value = CAST(concat('value-', partition, '-', offset) AS BINARY)
    AND unix_millis(timestamp) = {T0} + 10 * offset
    AND timestampType = 0
    AND (CASE WHEN offset % 10 = 0
              THEN size(headers) = 1 AND headers[0].key = 'n'
                   AND headers[0].value = CAST(CAST(offset AS STRING) AS BINARY)
              ELSE headers IS NULL END),
    false)"""


@pytest.fixture(scope="module")
def million(broker: Any) -> str:
    create_topic(broker.bootstrap, TOPIC, PARTITIONS)
    produce(broker.bootstrap, TOPIC, records_for, range(PARTITIONS), PER_PARTITION)
    return broker.bootstrap


def read(spark: SparkSession, bootstrap: str, **options: str) -> DataFrame:
    reader = spark.read.format("pykfk").option("kafka.bootstrap.servers", bootstrap)
    if not {"subscribe", "subscribePattern", "assign"} & set(options):
        reader = reader.option("subscribe", TOPIC)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def summary(df: DataFrame) -> dict[int, tuple[int, int, int, int]]:
    """partition -> (rows, first offset, last offset, wrong rows), in one pass."""
    rows = (
        df.groupBy("partition")
        .agg(
            F.count("*"),
            F.min("offset"),
            F.max("offset"),
            F.sum(F.when(F.expr(ROW_IS_RIGHT), 0).otherwise(1)),
        )
        .collect()
    )
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


def expect(ranges: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int, int, int]]:
    """The summary of reading [start, end) of each partition (empty ranges absent)."""
    return {p: (e - s, s, e - 1, 0) for p, (s, e) in ranges.items() if e > s}


def test_whole_topic_split_into_tasks_every_record_once(spark: SparkSession, million: str) -> None:
    df = read(spark, million, maxRecordsPerPartition="50000")
    assert df.rdd.getNumPartitions() == PARTITIONS * 3  # 125000 offsets -> 3 tasks each
    # One pass, no shuffle: 1M (partition, offset, row is right) triples come back as Arrow.
    table = df.select("partition", "offset", F.expr(ROW_IS_RIGHT).alias("ok"), "topic").toArrow()
    assert table.num_rows == PARTITIONS * PER_PARTITION
    assert pc.all(table.column("ok")).as_py()
    assert pc.unique(table.column("topic")).to_pylist() == [TOPIC]
    for p in range(PARTITIONS):
        offsets = table.filter(pc.equal(table.column("partition"), p)).column("offset")
        assert len(offsets) == PER_PARTITION
        assert pc.count_distinct(offsets).as_py() == PER_PARTITION  # no duplicate...
        assert pc.min_max(offsets).as_py() == {"min": 0, "max": PER_PARTITION - 1}  # ...so no gap


def test_default_options_read_everything(spark: SparkSession, million: str) -> None:
    df = read(spark, million)
    assert df.rdd.getNumPartitions() == PARTITIONS
    assert df.count() == PARTITIONS * PER_PARTITION


def test_json_offsets_with_earliest_latest_and_explicit(spark: SparkSession, million: str) -> None:
    df = read(
        spark,
        million,
        assign=json.dumps({TOPIC: [0, 1, 2, 3]}),
        startingOffsets=json.dumps({TOPIC: {"0": 1000, "1": -2, "2": 124_900, "3": 5}}),
        endingOffsets=json.dumps({TOPIC: {"0": 1500, "1": 100, "2": -1, "3": 5}}),
    )
    assert summary(df) == expect({0: (1000, 1500), 1: (0, 100), 2: (124_900, 125_000), 3: (5, 5)})


def test_partitions_missing_from_json_take_the_defaults(spark: SparkSession, million: str) -> None:
    df = read(
        spark,
        million,
        startingOffsets=json.dumps({TOPIC: {"4": 124_990}}),
        endingOffsets=json.dumps({TOPIC: {str(p): 3 for p in range(PARTITIONS) if p != 4}}),
    )
    assert summary(df) == expect(
        {**{p: (0, 3) for p in range(PARTITIONS) if p != 4}, 4: (124_990, 125_000)}
    )


def test_starting_timestamp(spark: SparkSession, million: str) -> None:
    # first record at or after the time: T0 + 10 * 124001 (5 ms after offset 124000)
    df = read(spark, million, startingTimestamp=str(T0 + 10 * 124_000 + 5))
    assert summary(df) == expect({p: (124_001, PER_PARTITION) for p in range(PARTITIONS)})


def test_ending_timestamp(spark: SparkSession, million: str) -> None:
    df = read(spark, million, endingTimestamp=str(T0 + 10 * 100))
    assert summary(df) == expect({p: (0, 100) for p in range(PARTITIONS)})


def test_offsets_by_timestamp_per_partition(spark: SparkSession, million: str) -> None:
    df = read(
        spark,
        million,
        assign=json.dumps({TOPIC: [0, 1]}),
        startingOffsetsByTimestamp=json.dumps(
            {TOPIC: {"0": T0 + 10 * 50_000, "1": T0 + 10 * 124_999}}
        ),
        endingOffsetsByTimestamp=json.dumps({TOPIC: {"0": T0 + 10 * 50_100}}),
    )
    assert summary(df) == expect({0: (50_000, 50_100), 1: (124_999, PER_PARTITION)})


def test_starting_timestamp_after_every_record(spark: SparkSession, million: str) -> None:
    late = str(T0 + 10 * PER_PARTITION + 1)
    with pytest.raises(Exception, match="startingOffsetsByTimestampStrategy"):
        read(spark, million, startingTimestamp=late).count()
    assert (
        read(
            spark, million, startingTimestamp=late, startingOffsetsByTimestampStrategy="latest"
        ).count()
        == 0
    )


def test_subscribe_pattern_and_min_partitions(spark: SparkSession, million: str) -> None:
    ends = json.dumps({TOPIC: {str(p): 50 for p in range(PARTITIONS)}})
    df = read(spark, million, subscribePattern="mil+ion", endingOffsets=ends, minPartitions="16")
    assert df.rdd.getNumPartitions() == 16
    assert summary(df) == expect({p: (0, 50) for p in range(PARTITIONS)})
    assert read(spark, million, subscribePattern="mill").count() == 0  # the whole name must match


def test_without_headers_column(spark: SparkSession, million: str) -> None:
    df = read(
        spark,
        million,
        includeHeaders="false",
        endingOffsets=json.dumps({TOPIC: {"0": 20}}),
        assign=json.dumps({TOPIC: [0]}),
    )
    assert "headers" not in df.columns
    rows = df.orderBy("offset").collect()
    assert [r.offset for r in rows] == list(range(20))
    assert rows[1].key == b"0:1" and rows[1].value == b"value-0-1"


def test_offsets_beyond_the_log_are_refused(spark: SparkSession, million: str) -> None:
    with pytest.raises(Exception, match="beyond the log end"):
        read(spark, million, startingOffsets=json.dumps({TOPIC: {"0": PER_PARTITION + 1}})).count()
    with pytest.raises(Exception, match="before starting offset"):
        read(
            spark,
            million,
            assign=json.dumps({TOPIC: [0]}),
            startingOffsets=json.dumps({TOPIC: {"0": 10}}),
            endingOffsets=json.dumps({TOPIC: {"0": 5}}),
        ).count()


# ------------------------------------------------------------------------ streaming


def _input_rows(query: Any) -> list[int]:
    """Rows read by each micro-batch of a finished query that had data."""
    rows = []
    for progress in query.recentProgress:
        n = progress.numInputRows if hasattr(progress, "numInputRows") else progress["numInputRows"]
        if n:
            rows.append(n)
    return rows


def _offsets_in(spark: SparkSession, path: str) -> list[tuple[int, int]]:
    try:
        return sorted(
            (r.partition, r.offset)
            for r in spark.read.parquet(path).select("partition", "offset").collect()
        )
    except Exception as exc:  # no micro-batch has written yet
        if "PATH_NOT_FOUND" in str(exc) or "UNABLE_TO_INFER_SCHEMA" in str(exc):
            return []
        raise


def test_stream_available_now_reads_only_new_records(
    spark: SparkSession, broker: Any, tmp_path: Any
) -> None:
    topic = "stream"
    create_topic(broker.bootstrap, topic, 2)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run(trigger: dict[str, Any]) -> Any:
        stream = (
            spark.readStream.format("pykfk")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "60")
            .load()
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    def expected(per_partition: int) -> list[tuple[int, int]]:
        return [(p, o) for p in range(2) for o in range(per_partition)]

    produce(broker.bootstrap, topic, records_for, range(2), 50)
    query = run({"availableNow": True})
    assert query.awaitTermination(180)
    assert _offsets_in(spark, out) == expected(50)
    assert _input_rows(query) == [60, 40]  # maxOffsetsPerTrigger held, then the rest

    produce(broker.bootstrap, topic, records_for, range(2), 15, first_offset=50)
    query = run({"availableNow": True})
    assert query.awaitTermination(180)
    assert _input_rows(query) == [30]
    assert _offsets_in(spark, out) == expected(65)

    query = run({"availableNow": True})  # nothing new: nothing read
    assert query.awaitTermination(180)
    assert _input_rows(query) == []
    assert _offsets_in(spark, out) == expected(65)

    # A processing-time trigger on the same checkpoint picks up records as they arrive.
    query = run({"processingTime": "1 second"})
    try:
        produce(broker.bootstrap, topic, records_for, range(2), 10, first_offset=65)
        deadline = time.monotonic() + 120
        while _offsets_in(spark, out) != expected(75) and time.monotonic() < deadline:
            assert query.exception() is None
            time.sleep(0.5)
    finally:
        query.stop()
    assert _offsets_in(spark, out) == expected(75)

    rows = spark.read.parquet(out).where(f"NOT {ROW_IS_RIGHT}").count()
    assert rows == 0


# --------------------------------------------------------------------------- writer


def _consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "spark-writer-check",
            "enable.auto.commit": False,
            "api.version.request": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        messages: list[Any] = []
        deadline = time.monotonic() + 60
        while len(messages) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                assert msg.error() is None, msg.error()
                messages.append(msg)
        time.sleep(0.5)  # anything beyond the expected count would be a duplicate
        messages += [m for m in consumer.consume(1000, timeout=0.5) if m.error() is None]
        return messages
    finally:
        consumer.close()


def test_writer_records_read_back_with_confluent_kafka(spark: SparkSession, broker: Any) -> None:
    topic = "written"
    create_topic(broker.bootstrap, topic, 3)
    rows = []
    for i in range(600):
        key = None if i % 50 == 0 else b"key-%d" % i
        partition = i % 3 if i < 200 else None
        headers = [("trace", b"%d" % i), ("empty", None)] if i % 4 == 0 else None
        rows.append((key, b"payload-%d-" % i + bytes(i % 256), partition, headers))
    df = spark.createDataFrame(
        rows,
        "key binary, value binary, partition int, headers array<struct<key:string,value:binary>>",
    ).repartition(3)
    (
        df.write.format("pykfk")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .mode("append")
        .save()
    )

    got = _consume_all(broker.bootstrap, topic, 3, len(rows))
    assert len(got) == len(rows)
    by_value = {m.value(): m for m in got}
    assert len(by_value) == len(rows)
    for key, value, partition, headers in rows:
        msg = by_value[value]
        assert msg.key() == key
        assert (msg.headers() or None) == headers
        if partition is not None:
            assert msg.partition() == partition
        elif key is not None:  # the Java client's murmur2 choice
            assert msg.partition() == partition_for_key(key, 3)


def test_writer_topic_column_and_string_columns(spark: SparkSession, broker: Any) -> None:
    for topic in ("routed-a", "routed-b"):
        create_topic(broker.bootstrap, topic, 1)
    rows = [("routed-a" if i % 3 else "routed-b", f"k{i}", f"välue {i}") for i in range(90)]
    df = spark.createDataFrame(rows, "topic string, key string, value string")
    df.write.format("pykfk").option("kafka.bootstrap.servers", broker.bootstrap).mode(
        "append"
    ).save()
    for topic, count in (("routed-a", 60), ("routed-b", 30)):
        got = _consume_all(broker.bootstrap, topic, 1, count)
        assert sorted((m.key(), m.value()) for m in got) == sorted(
            (k.encode(), v.encode()) for t, k, v in rows if t == topic
        )


def test_writer_needs_a_value_column_and_a_topic(spark: SparkSession, broker: Any) -> None:
    df = spark.createDataFrame([(b"k",)], "key binary")
    with pytest.raises(Exception, match="value column"):
        df.write.format("pykfk").option("kafka.bootstrap.servers", broker.bootstrap).option(
            "topic", "x"
        ).mode("append").save()
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="topic"):
        df.write.format("pykfk").option("kafka.bootstrap.servers", broker.bootstrap).mode(
            "append"
        ).save()


def test_reads_survive_a_broker_restart_between_queries(spark: SparkSession, tmp_path: Any) -> None:
    """Workers keep leader connections between tasks; a restarted broker leaves them dead,
    and the next read must reconnect instead of failing."""
    from pykfk.testing import BrokerProcess

    with BrokerProcess(str(tmp_path / "data")) as other:
        create_topic(other.bootstrap, "restarts", 2)
        produce(other.bootstrap, "restarts", records_for, range(2), 300)
        df = read(spark, other.bootstrap, subscribe="restarts")
        assert summary(df) == expect({0: (0, 300), 1: (0, 300)})
        other.restart()
        assert summary(df) == expect({0: (0, 300), 1: (0, 300)})
