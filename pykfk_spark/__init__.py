"""pykfk's Spark integration: the ``pykfk`` PySpark data source (batch and streaming
reads of topics, writes to a topic) and the ``pykfk-spark-ingest`` job.

    import pykfk_spark
    pykfk_spark.register(spark)
    df = (spark.read.format("pykfk")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events").load())
"""

from __future__ import annotations

from typing import Any

__all__ = ["SOURCE_NAME", "register"]

SOURCE_NAME = "pykfk"


def register(spark: Any) -> None:
    """Make ``format("pykfk")`` available on ``spark`` (a SparkSession)."""
    from .datasource import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
