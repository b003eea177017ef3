"""The mirror's Prometheus endpoint (``metrics.listener``): what a process copied per
topic, its lag per partition and its throughput, in the Prometheus text format through
prometheus_client (the ``metrics`` extra), served on a thread of its own.

Names carry the ``pykfk_mirror_`` prefix; counters end in ``_total``. Values are read
from the mirror at scrape time: the loop thread keeps counting, the scrape takes
copies (docs/mirror.md lists the metrics).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any, Protocol
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pykfk.mirror.config import MirrorConfig
from pykfk.mirror.naming import ReplicationPolicy
from pykfk.mirror.stats import MirrorStats
from pykfk.mirror.transactions import PartitionTransactions

__all__ = ["MirrorCollector", "MirrorMetricsServer", "MirrorView"]

log = logging.getLogger("pykfk.mirror")


class MirrorView(Protocol):
    """What the endpoint reads of a mirror process (runner.Mirror is one)."""

    config: MirrorConfig
    policy: ReplicationPolicy
    stats: MirrorStats
    rates: tuple[float, float]
    transactions: PartitionTransactions | None

    def lag_by_partition(self) -> dict[tuple[str, int], int]: ...

    def owned_partitions(self) -> int: ...


class MirrorCollector(Collector):
    """The metrics of one Mirror, collected when scraped."""

    def __init__(self, mirror: MirrorView):
        self.mirror = mirror

    def collect(self) -> Iterator[Metric]:
        mirror = self.mirror
        labels = ["source", "target"]
        pair = [mirror.config.source.alias, mirror.config.target.alias]
        yield from self._per_topic(labels, pair)
        lag = GaugeMetricFamily("pykfk_mirror_lag_records", "Records in the source not yet copied, per "
                                "partition this process copies", labels=[*labels, "topic", "partition"])
        for (topic, partition), records in sorted(mirror.lag_by_partition().items()):
            lag.add_metric([*pair, topic, str(partition)], records)
        yield lag
        records_rate, bytes_rate = mirror.rates
        yield self._gauge("pykfk_mirror_records_per_second", "Records copied per second over the "
                          "last report.interval.ms", labels, pair, records_rate)
        yield self._gauge("pykfk_mirror_bytes_per_second", "Key and value bytes copied per second over "
                          "the last report.interval.ms", labels, pair, bytes_rate)
        yield self._gauge("pykfk_mirror_partitions", "Source partitions this process copies",
                          labels, pair, mirror.owned_partitions())
        yield self._gauge("pykfk_mirror_exactly_once", "1 when records and progress commit in "
                          "transactions, 0 for at-least-once copying", labels, pair,
                          1 if mirror.transactions is not None else 0)
        yield from self._totals(labels, pair)

    def _per_topic(self, labels: list[str], pair: list[str]) -> Iterator[Metric]:
        by_topic = dict(self.mirror.stats.by_topic)
        records = CounterMetricFamily("pykfk_mirror_records", "Records copied, per source topic",
                                      labels=[*labels, "topic", "remote_topic"])
        size = CounterMetricFamily("pykfk_mirror_bytes", "Key and value bytes copied, per source topic",
                                   labels=[*labels, "topic", "remote_topic"])
        for topic, (count, nbytes) in sorted(by_topic.items()):
            names = [*pair, topic, self.mirror.policy.remote_topic(topic)]
            records.add_metric(names, count)
            size.add_metric(names, nbytes)
        yield records
        yield size

    def _totals(self, labels: list[str], pair: list[str]) -> Iterator[Metric]:
        stats = self.mirror.stats
        transactions = self.mirror.transactions
        for name, text, value in (
            ("pykfk_mirror_progress_writes", "Progress writes (each a commit point)", stats.progress_writes),
            ("pykfk_mirror_transactions", "Transactions committed in the target",
             0 if transactions is None else transactions.committed),
            ("pykfk_mirror_checkpoints", "Consumer-group checkpoints written", stats.checkpoints),
            ("pykfk_mirror_skipped_cycle_records", "Records not copied because they came from the target",
             stats.skipped_cycles),
        ):
            counter = CounterMetricFamily(name, text, labels=labels)
            counter.add_metric(pair, value)
            yield counter

    @staticmethod
    def _gauge(name: str, text: str, labels: list[str], pair: list[str], value: float) -> Metric:
        gauge = GaugeMetricFamily(name, text, labels=labels)
        gauge.add_metric(pair, value)
        return gauge


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape on the mirror's stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class MirrorMetricsServer:
    """``GET /metrics`` (any path answers the same) on ``host:port`` from a daemon thread;
    port 0 picks a free one (``port`` is the bound one after ``start``)."""

    def __init__(self, mirror: MirrorView, host: str, port: int):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MirrorCollector(mirror))
        ProcessCollector(registry=self.registry)
        self.host, self.port = host, port
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> MirrorMetricsServer:
        server = make_server(self.host, self.port, make_wsgi_app(self.registry), handler_class=_QuietHandler)
        self._server = server
        self.port = server.server_port
        self._thread = threading.Thread(target=server.serve_forever, name="mirror-metrics", daemon=True)
        self._thread.start()
        log.info("metrics at http://%s:%d/metrics", self.host, self.port)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
