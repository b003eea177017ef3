"""Fixtures shared with other suites: the Spark tests' session-wide SparkSession and the
mirror tests' standalone brokers."""

from tests.mirror.conftest import standalone_factory  # noqa: F401 - a fixture
from tests.spark.conftest import spark  # noqa: F401 - a fixture
