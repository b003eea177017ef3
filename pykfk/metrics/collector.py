"""The broker's metrics as a prometheus_client Collector, under Kafka's names as the JMX
exporter renders them (``kafka_server_brokertopicmetrics_messagesin_total``, ...).

Nothing is recorded through prometheus_client while the broker works: the counters of
``pykfk.metrics.stats`` are read, and gauges (log sizes, under-replicated and offline
partitions, groups, consumer lag, connections) are computed from the broker's state,
at scrape time, on the event loop, so they see one consistent moment. Groups and their
committed offsets come through the coordinator's own (async) ListGroups and OffsetFetch,
read by ``refresh`` just before the collection.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from pykfk.group.share.coordinator import coordinator_of
from pykfk.metrics.stats import LATENCY_BOUNDS_S, TIME_PARTS, RequestStats
from pykfk.server.telemetry import find_telemetry

if TYPE_CHECKING:
    from pykfk.cluster.controller import ClusterController
    from pykfk.cluster.metadata import MetadataStore
    from pykfk.cluster.replica import ReplicaManager
    from pykfk.config import BrokerConfig
    from pykfk.group import GroupCoordinator
    from pykfk.log.manager import LogManager
    from pykfk.server.connection import KafkaServer
    from pykfk.server.dispatch import Registry


class ClusterRole(Protocol):
    @property
    def controller(self) -> ClusterController | None:
        """This broker's controller object (None before the store is open)."""
        ...


class MetricsSource(Protocol):
    """What the collector reads of a broker (``pykfk.broker.Broker`` is one)."""

    @property
    def broker_id(self) -> int: ...
    @property
    def serving(self) -> bool: ...
    @property
    def config(self) -> BrokerConfig: ...
    @property
    def metadata(self) -> MetadataStore: ...
    @property
    def replica_manager(self) -> ReplicaManager: ...
    @property
    def group_coordinator(self) -> GroupCoordinator: ...
    @property
    def request_stats(self) -> RequestStats: ...
    @property
    def registry(self) -> Registry | None: ...
    @property
    def log_manager(self) -> LogManager | None: ...
    @property
    def servers(self) -> list[KafkaServer]: ...
    @property
    def cluster(self) -> ClusterRole: ...
    def get_log(self, topic: str, partition: int) -> Any: ...

# (group id, state, {(topic, partition): committed offset})
GroupOffsets = tuple[str, str, dict[tuple[str, int], int]]

# Quota types as Kafka names its throttle-time sensors (ClientQuotaManager per type).
_QUOTA_TYPES = {"producer_byte_rate": "Produce", "consumer_byte_rate": "Fetch", "request_percentage": "Request"}


def _le(bounds_s: Sequence[float]) -> list[str]:
    """Bucket labels in ms, then +Inf."""
    return [f"{bound * 1000:g}" for bound in bounds_s] + ["+Inf"]


_LATENCY_LE = _le(LATENCY_BOUNDS_S)


def _buckets(le: list[str], cumulative: list[int]) -> list[tuple[str, float]]:
    return [(label, float(count)) for label, count in zip(le, cumulative, strict=True)]


class BrokerCollector(Collector):
    """Collects one broker's metrics. Call ``collect`` on the broker's event loop."""

    def __init__(self, broker: MetricsSource):
        self.broker = broker
        self._groups: list[GroupOffsets] = []

    async def refresh(self) -> None:
        """Read the groups this broker coordinates and their committed offsets."""
        if not self.broker.serving:
            return
        coordinator = self.broker.group_coordinator
        groups = []
        for entry in (await coordinator.list_groups())["groups"]:
            fetched = await coordinator.offset_fetch(entry["group_id"], None)
            offsets = {(topic["name"], part["partition_index"]): part["committed_offset"]
                       for topic in fetched["topics"] for part in topic["partitions"]
                       if part["committed_offset"] >= 0}
            groups.append((entry["group_id"], entry["group_state"], offsets))
        self._groups = groups

    def collect(self) -> Iterable[Metric]:
        broker = self.broker
        if not broker.serving:
            return []  # starting or stopping: the parts below may not be there
        metrics: list[Metric] = []
        for part in (self._topic_metrics, self._request_metrics, self._replica_metrics,
                     self._controller_metrics, self._log_metrics, self._group_metrics,
                     self._network_metrics, self._client_metrics):
            metrics.extend(part())
        return metrics

    # -- client telemetry (KIP-714) ----------------------------------------------------

    def _client_metrics(self) -> Iterator[Metric]:
        """What clients pushed, under their OTLP names (dots as underscores), each series
        labelled with the client and its data point's attributes."""
        state = find_telemetry(self.broker)
        if state is None:
            return
        families: dict[tuple[str, str], list[tuple[dict[str, str], float, str]]] = {}
        for instance in state.instances.values():
            for (kind, name), series in instance.series.items():
                for point_labels, entry in series.items():
                    families.setdefault((kind, name), []).append(
                        ({**dict(point_labels), **instance.labels}, entry.value, entry.description))
        for (kind, name), points in sorted(families.items()):
            label_names = sorted({label for labels, _v, _d in points for label in labels})
            doc = points[0][2] or f"client metric {name}"
            family: GaugeMetricFamily | CounterMetricFamily = (
                CounterMetricFamily(name, doc, labels=label_names) if kind == "counter"
                else GaugeMetricFamily(name, doc, labels=label_names))
            for labels, value, _doc in points:
                family.add_metric([labels.get(label, "") for label in label_names], value)
            yield family

    # -- topics ------------------------------------------------------------------------

    def _topic_metrics(self) -> Iterator[Metric]:
        manager = self.broker.replica_manager
        metadata = self.broker.metadata
        for topic in manager.topic_stats.topics():
            if metadata.get_topic(topic) is None:
                manager.topic_stats.remove(topic)  # deleted: its series end, as in Kafka
        items = manager.topic_stats.items()
        fields = (
            ("messagesin", "messages_in", "Records appended as leader"),
            ("bytesin", "bytes_in", "Record bytes appended as leader (from producers)"),
            ("bytesout", "bytes_out", "Record bytes sent to consumers"),
            ("replicationbytesin", "replication_bytes_in", "Record bytes appended as follower"),
            ("replicationbytesout", "replication_bytes_out", "Record bytes sent to followers"),
            ("failedproducerequests", "failed_produce_requests",
             "Partitions of Produce requests answered with an error"),
            ("failedfetchrequests", "failed_fetch_requests",
             "Partitions of Fetch requests answered with an error"),
        )
        for name, attr, doc in fields:
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc, labels=["topic"])
            for topic, stats in items:
                family.add_metric([topic], getattr(stats, attr))
            yield family

    # -- requests ----------------------------------------------------------------------

    def _request_metrics(self) -> Iterator[Metric]:
        stats = self.broker.request_stats
        registry = self.broker.registry
        names: dict[int, str] = {}
        requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                       "Requests received, by API and version",
                                       labels=["request", "version"])
        for api_key, version, count in stats.requests():
            names[api_key] = name = _api_name(registry, api_key)
            requests.add_metric([name, str(version)], count)
        yield requests
        times = stats.times()
        for index, part in enumerate(TIME_PARTS):
            family = HistogramMetricFamily(f"kafka_network_requestmetrics_{part}",
                                           f"Request time: {part[:-2]} in ms", labels=["request"])
            for api_key, histograms in sorted(times.items()):
                histogram = histograms[index]
                name = names.get(api_key) or _api_name(registry, api_key)
                family.add_metric([name], _buckets(_LATENCY_LE, histogram.cumulative()),
                                  sum_value=histogram.sum * 1000)
            yield family
        throttle = CounterMetricFamily("kafka_server_throttle_time_ms",
                                       "Throttle time given to clients over a quota", labels=["quota_type"])
        throttled = CounterMetricFamily("kafka_server_throttled_responses",
                                        "Responses throttled for a quota", labels=["quota_type"])
        for key, seconds in sorted(stats.throttle_time_s.items()):
            quota_type = _QUOTA_TYPES.get(key, key)
            throttle.add_metric([quota_type], seconds * 1000)
            throttled.add_metric([quota_type], stats.throttled.get(key, 0))
        yield throttle
        yield throttled

    # -- replication and the controller -----------------------------------------------

    def _replica_metrics(self) -> Iterator[Metric]:
        manager = self.broker.replica_manager
        partitions = list(manager.partitions.values())
        led = [p for p in partitions if p.role == "leader"]
        under = sum(1 for p in led if len(p.isr) < len(p.replicas))
        under_min = sum(1 for p in led if len(p.isr) < p.min_insync_replicas())
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount",
                                "Partitions with a replica on this broker", value=len(partitions))
        yield GaugeMetricFamily("kafka_server_replicamanager_leadercount",
                                "Partitions this broker leads", value=len(led))
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions led here whose ISR is smaller than their replica set", value=under)
        yield GaugeMetricFamily("kafka_server_replicamanager_underminisrpartitioncount",
                                "Partitions led here whose ISR is smaller than min.insync.replicas",
                                value=under_min)
        replication = manager.replication_stats
        yield CounterMetricFamily("kafka_server_replicamanager_isrshrinks",
                                  "ISR shrinks of partitions this broker leads", value=replication.isr_shrinks)
        yield CounterMetricFamily("kafka_server_replicamanager_isrexpands",
                                  "ISR expansions of partitions this broker leads", value=replication.isr_expands)

    def _controller_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        store = broker.metadata
        active = store.controller_id() == broker.broker_id
        offline = 0
        if active:
            live = store.live_broker_ids()
            for name, info in store.topics().items():
                for partition in range(info.partitions):
                    state = store.partition_state(name, partition)
                    if state is not None and state.leader not in live:
                        offline += 1
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1 on the active controller, else 0", value=int(active))
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a live leader (reported by the active controller)",
                                value=offline)
        controller = broker.cluster.controller
        elections = controller.leader_elections if controller is not None else 0
        unclean = controller.unclean_leader_elections if controller is not None else 0
        yield CounterMetricFamily("kafka_controller_controllerstats_leaderelections",
                                  "Leader elections this broker decided as controller", value=elections)
        yield CounterMetricFamily("kafka_controller_controllerstats_uncleanleaderelections",
                                  "Leader elections outside the ISR this broker decided as controller",
                                  value=unclean)

    # -- logs --------------------------------------------------------------------------

    def _log_metrics(self) -> Iterator[Metric]:
        log_manager = self.broker.log_manager
        if log_manager is None:
            return
        cumulative, total = log_manager.flush_stats.snapshot()
        flushes = HistogramMetricFamily("kafka_log_logflushstats_logflushrateandtimems",
                                        "Log flushes (fsync) and their time in ms")
        flushes.add_metric([], _buckets(_le(log_manager.flush_stats.histogram.bounds), cumulative),
                           sum_value=total * 1000)
        yield flushes
        yield from self._log_dir_metrics(log_manager)
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log segments", labels=labels)
        segments = GaugeMetricFamily("kafka_log_log_numlogsegments", "Segments of a partition's log",
                                     labels=labels)
        start = GaugeMetricFamily("kafka_log_log_logstartoffset", "A partition's log start offset",
                                  labels=labels)
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "A partition's log end offset", labels=labels)
        for (topic, partition), plog in sorted(log_manager.logs().items()):
            key = [topic, str(partition)]
            size.add_metric(key, plog.size_bytes)
            segments.add_metric(key, len(plog.segments))
            start.add_metric(key, plog.log_start_offset)
            end.add_metric(key, plog.log_end_offset)
        yield from (size, segments, start, end)

    @staticmethod
    def _log_dir_metrics(log_manager: LogManager) -> Iterator[Metric]:
        yield GaugeMetricFamily("kafka_log_logmanager_offlinelogdirectorycount",
                                "Log dirs offline after an I/O error", value=len(log_manager.offline_dirs()))
        offline = GaugeMetricFamily("kafka_log_logmanager_logdirectoryoffline",
                                    "1 while the log dir is offline", labels=["logDirectory"])
        refusing = GaugeMetricFamily("kafka_log_logmanager_logdirectoryrefusingappends",
                                     "1 while the log dir is full or under log.dir.free.bytes.min",
                                     labels=["logDirectory"])
        low = GaugeMetricFamily("kafka_log_logmanager_logdirectorylowspace",
                                "1 while the log dir's free space is under log.dir.free.bytes.alert",
                                labels=["logDirectory"])
        free = GaugeMetricFamily("kafka_log_logmanager_logdirectoryfreebytes",
                                 "Free bytes of the log dir at its last check", labels=["logDirectory"])
        low_dirs = set(log_manager.low_space_dirs())
        for log_dir in log_manager.log_dirs:
            state = log_manager.dir_state(log_dir)
            offline.add_metric([log_dir], int(state == "offline"))
            refusing.add_metric([log_dir], int(state in ("full", "low")))
            low.add_metric([log_dir], int(log_dir in low_dirs))
            if log_dir in log_manager.free_bytes:
                free.add_metric([log_dir], log_manager.free_bytes[log_dir])
        yield from (offline, refusing, low, free)

    # -- groups ------------------------------------------------------------------------

    def _group_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        groups = GaugeMetricFamily("kafka_coordinator_group_groupmetadatamanager_numgroups",
                                   "Groups this broker coordinates, by state", labels=["state"])
        by_state: dict[str, int] = {}
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "High watermark minus committed offset, for partitions with a "
                                "replica on this broker", labels=["group", "topic", "partition"])
        committed = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                      "Committed offset of a group", labels=["group", "topic", "partition"])
        for group_id, state, offsets in self._groups:
            by_state[state] = by_state.get(state, 0) + 1
            for (topic, partition), offset in sorted(offsets.items()):
                key = [group_id, topic, str(partition)]
                committed.add_metric(key, offset)
                plog = broker.get_log(topic, partition)
                if plog is not None:
                    lag.add_metric(key, max(plog.high_watermark - offset, 0))
        for state, count in sorted(by_state.items()):
            groups.add_metric([state], count)
        yield from (groups, committed, lag)
        yield from self._share_group_metrics()

    def _share_group_metrics(self) -> Iterator[Metric]:
        """Share groups (KIP-932): per share partition this broker leads, records by what
        happened to them, and the records not yet acknowledged or archived."""
        coordinator = coordinator_of(self.broker)
        labels = ["group", "topic", "partition"]
        records = CounterMetricFamily("kafka_sharegroup_records", "Records of share partitions by event "
                                      "(acquired, acknowledged, released, archived, redelivered)",
                                      labels=[*labels, "event"])
        lag = GaugeMetricFamily("kafka_sharegroup_lag", "Records below the high watermark not yet acknowledged "
                                "or archived", labels=labels)
        for key, part in sorted(coordinator.partitions.items()) if coordinator is not None else ():
            names = [key[0], key[1], str(key[2])]
            counters = part.counters
            for event, count in (("acquired", counters.acquired), ("acknowledged", counters.acknowledged),
                                 ("released", counters.released), ("archived", counters.archived),
                                 ("redelivered", counters.redelivered)):
                records.add_metric([*names, event], count)
            plog = self.broker.get_log(key[1], key[2])
            if plog is not None and coordinator is not None:
                lag.add_metric(names, coordinator.lag(key, plog.high_watermark))
        yield from (records, lag)

    # -- network -----------------------------------------------------------------------

    def _network_metrics(self) -> Iterator[Metric]:
        broker = self.broker
        labels = ["listener"]
        count = GaugeMetricFamily("kafka_server_socketservermetrics_connection_count",
                                  "Open client connections", labels=labels)
        created = CounterMetricFamily("kafka_server_socketservermetrics_connection_creation",
                                      "Connections accepted", labels=labels)
        closed = CounterMetricFamily("kafka_server_socketservermetrics_connection_close",
                                     "Connections closed", labels=labels)
        for listener, server in zip(broker.config.listeners, broker.servers, strict=False):
            count.add_metric([listener.name], len(server.connections))
            created.add_metric([listener.name], server.connections_created)
            closed.add_metric([listener.name], server.connections_closed)
        yield from (count, created, closed)


def _api_name(registry: Registry | None, api_key: int) -> str:
    handler = registry.get(api_key) if registry is not None else None
    return handler.name if handler is not None else str(api_key)
