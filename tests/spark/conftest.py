"""Fixtures for the Spark tests: one SparkSession (local[2]) and one broker process for
the whole session, since each costs seconds to start (Spark ~10-15 s).

Spark's Python workers import ``pykfk_spark`` by name to unpickle readers and writers,
so it must be importable in every process: the pip install (editable or wheel) provides
it to every interpreter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pyarrow  # noqa: F401 - the workers need it: fail here, not in a Spark task
import pyspark  # noqa: F401
import pytest

# Spark listeners on loopback only; workers run this interpreter (zk-spark.md pitfalls 1, 3).
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# JIT level 1 and the serial GC halve the JVM's CPU time to the first action on a small box.
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    import pykfk_spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("pykfk-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .config("spark.driver.memory", "1g")
        .config("spark.driver.extraJavaOptions", FAST_JVM)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    pykfk_spark.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """One broker process for every Spark test (each test uses its own topics)."""
    from pykfk.testing import BrokerProcess

    process = BrokerProcess(str(tmp_path_factory.mktemp("broker") / "data"))
    process.start()
    try:
        yield process
    finally:
        process.stop()
