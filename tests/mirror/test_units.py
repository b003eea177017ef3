"""The mirror's pure parts: configuration files, remote names and cycles, offset syncs,
progress entries, reachability lines."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

from pykfk.mirror.config import ConfigError, load_config, parse_config
from pykfk.mirror.health import ClusterState, TargetUnavailable, unreachable
from pykfk.mirror.naming import ORIGIN_HEADER, ReplicationPolicy
from pykfk.mirror.progress import AuditRange, OffsetSyncs, ProgressEntry, ProgressStore

BASE = {"source.alias": "east", "source.bootstrap.servers": "127.0.0.1:1",
        "target.alias": "west", "target.bootstrap.servers": "127.0.0.1:2"}


def test_properties_and_yaml_files_give_the_same_configuration(tmp_path: Path) -> None:
    props = tmp_path / "m.properties"
    props.write_text("source.alias=east\nsource.bootstrap.servers=127.0.0.1:1\n"
                     "source.consumer.fetch.min.bytes=1000\ntarget.alias=west\n"
                     "target.bootstrap.servers=127.0.0.1:2\ntopics=orders, payments\n"
                     "progress.max.records=500\n")
    yaml_file = tmp_path / "m.yaml"
    yaml_file.write_text("source:\n  alias: east\n  bootstrap.servers: 127.0.0.1:1\n"
                         "  consumer:\n    fetch.min.bytes: 1000\n"
                         "target: {alias: west, bootstrap.servers: '127.0.0.1:2'}\n"
                         "topics: [orders, payments]\nprogress.max.records: 500\n")
    for config in (load_config(str(props)), load_config(str(yaml_file))):
        assert config.topics == ["orders", "payments"]
        assert config.progress_max_records == 500
        assert config.source.client("consumer") == {"bootstrap.servers": "127.0.0.1:1", "fetch.min.bytes": "1000"}
        assert config.group_id == "pykfk-mirror-east-west"
        assert config.checkpoints_topic == "east.checkpoints.internal"


@pytest.mark.parametrize(("extra", "message"), [
    ({"topics": ""}, "topics"),
    ({"topics": "a", "colour": "blue"}, "unknown setting 'colour'"),
    ({"topics": "a", "source.enable.auto.commit": "true"}, "set by the mirror"),
    ({"topics": "a", "target.producer.acks": "1"}, "set by the mirror"),
    ({"topics.regex": "("}, "topics.regex"),
    ({"topics": "a", "replication.policy": "prefix"}, "replication.policy"),
    ({"topics": "a", "progress.max.records": "0"}, "positive"),
    ({"topics": "a", "target.alias": "east"}, "must differ"),
    ({"topics": "a", "target.producer.transactional.id": "x"}, "set by the mirror"),
    ({"topics": "a", "source.isolation.level": "read_uncommitted"}, "set by the mirror"),
    ({"topics": "a", "exactly.once": "maybe"}, "exactly.once must be true or false"),
    ({"topics": "a", "metrics.listener": "127.0.0.1:9405"}, "metrics.listener"),
    # librdkafka's default mechanism, which pykfk's admin client does not log in with
    ({"topics": "a", "source.security.protocol": "SASL_SSL"}, "source.sasl.mechanisms: GSSAPI"),
    ({"topics": "a", "target.security.protocol": "SSL", "target.ssl.key.pem": "x"}, "target.ssl.key.pem"),
    ({"topics": "a", "source.admin.security.protocol": "TLS"}, "source.admin.security.protocol: unknown"),
    ({"topics": "a", "target.security.protocol": "SASL_SSL", "target.sasl.mechanisms": "OAUTHBEARER"},
     "target.sasl.oauthbearer.token.endpoint.url"),
])
def test_bad_settings_are_named(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({**BASE, **extra})


def test_regex_selection_leaves_internal_topics_out_but_a_listed_one_in() -> None:
    config = parse_config({**BASE, "topics.regex": ".*", "topics": "__pykfk_audit"})
    assert config.matches("orders")
    assert not config.matches("__consumer_offsets")
    assert not config.matches("east.checkpoints.internal")
    assert config.matches("__pykfk_audit")


def test_default_names_carry_the_source_and_detect_cycles() -> None:
    policy = ReplicationPolicy("default", "east", "west")
    assert policy.remote_topic("orders") == "east.orders"
    assert policy.is_cycle("west.orders")  # came from the target
    assert policy.is_cycle("north.west.orders")  # from the target through north
    assert not policy.is_cycle("app.events")  # dots in a name are not aliases
    assert not policy.is_cycle("westerly.orders")


def test_identity_names_keep_the_topic_and_read_the_origin_header() -> None:
    policy = ReplicationPolicy("identity", "east", "west")
    assert policy.remote_topic("orders") == "orders"
    assert policy.marks_records and not policy.is_cycle("west.orders")
    assert policy.origin_of([("a", b"1"), (ORIGIN_HEADER, b"west")]) == "west"
    assert policy.origin_of(None) is None


def test_offset_syncs_translate_to_the_newest_sync_at_or_before() -> None:
    syncs = OffsetSyncs()
    for source, target in ((0, 0), (100, 100), (200, 230)):
        syncs.add(source, target)
    assert syncs.translate(-1) is None
    assert syncs.translate(0) == 0
    assert syncs.translate(150) == 100  # re-reads 100..149, skips nothing
    assert syncs.translate(10_000) == 230
    syncs.add(150, 400)  # a resumed copy went back: later pairs win
    assert syncs.translate(199) == 400 and syncs.translate(300) == 400


def test_exactly_once_by_default_with_transactional_ids_from_the_group() -> None:
    config = parse_config({**BASE, "topics": "orders", "metrics.listener": "http://127.0.0.1:0"})
    assert config.exactly_once
    assert config.transactional_id_prefix == "pykfk-mirror-east-west"
    assert config.metrics_listener == ("127.0.0.1", 0)
    relaxed = parse_config({**BASE, "topics": "orders", "exactly.once": "false", "group.id": "dr",
                            "transactional.id.prefix": ""})
    assert not relaxed.exactly_once and relaxed.transactional_id_prefix == "dr"
    assert relaxed.metrics_listener is None


def test_offset_syncs_topic_and_lag_follow_mirrormaker() -> None:
    config = parse_config({**BASE, "topics": "orders"})
    assert config.offset_syncs_topic == "mm2-offset-syncs.east.internal"
    assert config.offset_lag_max == 100
    assert not parse_config({**BASE, "topics.regex": ".*"}).matches(config.offset_syncs_topic)
    with pytest.raises(ConfigError, match="offset.lag.max must be positive"):
        parse_config({**BASE, "topics": "orders", "offset.lag.max": "0"})


def test_progress_entries_carry_unpublished_audit_ranges() -> None:
    ranges = (AuditRange(500, ((60_000, 20), (120_000, 480))), AuditRange(900, ((120_000, 400),)))
    entry = ProgressEntry(900, "east.orders", 3, 1204, ranges)
    assert ProgressEntry.decode(entry.encode()) == entry
    # Entries written before audit ranges existed read as having none.
    old = b'{"offset": 5, "target_topic": "east.orders", "target_partition": 0, "target_offset": 7}'
    assert ProgressEntry.decode(old).audit == ()


def test_a_cluster_state_prints_one_line_per_change() -> None:
    lines: list[str] = []
    state = ClusterState("target", "127.0.0.1:9093", lines.append)
    state.ok()
    state.failed("timed out")
    state.failed()
    state.failed()
    assert not state.ready()  # within the pause after a failure
    state.ok()
    state.ok()
    assert lines == ["target 127.0.0.1:9093 unreachable, retrying (timed out)",
                     "target 127.0.0.1:9093 reachable again after 0 s"]
    # A client's lost connections are no outage by themselves (idle ones get closed).
    state.on_client_error(KafkaError(KafkaError._ALL_BROKERS_DOWN))
    assert len(lines) == 2 and not state.down


def test_offset_syncs_thin_out_old_ones_and_still_translate_everything() -> None:
    syncs = OffsetSyncs()
    for n in range(5000):
        syncs.add(n * 100, n * 103)
    assert len(syncs.source) <= 1000
    assert syncs.translate(0) == 0  # the oldest stays
    assert syncs.translate(499_950) == 4999 * 103  # recent ones stay dense
    for offset in range(0, 500_000, 997):
        translated = syncs.translate(offset)
        assert translated is not None and translated <= offset // 100 * 103


class _LeaderPendingEnds:
    """A consumer's watermark query that fails the way librdkafka's does while its
    metadata says a partition or its leader is unknown (a leader failing over, a broker
    just restarted), ``failures`` times, then answers ``high``."""

    def __init__(self, failures: int, high: int, code: int = KafkaError._UNKNOWN_PARTITION):
        self.failures, self.high, self.code, self.calls = failures, high, code, 0

    def get_watermark_offsets(self, tp: object, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.calls <= self.failures:
            raise KafkaException(KafkaError(self.code, "Failed to get watermark offsets: Local: Unknown partition"))
        return 0, self.high

    def close(self) -> None:
        pass


@pytest.mark.parametrize("code", [KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
                                  KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION])
def test_a_partition_whose_leader_is_unknown_for_a_moment_is_asked_again(code: int) -> None:
    store = ProgressStore({"bootstrap.servers": "127.0.0.1:1"}, "progress", "syncs")
    real_ends, store.ends = store.ends, _LeaderPendingEnds(2, 1234, code)  # type: ignore[assignment]
    try:
        assert store.target_end("a.events", 0, timeout_s=10) == 1234
        assert store.ends.calls == 3  # type: ignore[attr-defined]
        assert store.source_start(store.ends, "events", 0) == 0  # type: ignore[arg-type]
    finally:
        real_ends.close()
        store.close()


def test_a_partition_unknown_for_longer_pauses_the_mirror_instead_of_stopping_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Past the answer timeout the target counts as not answering: the copy pauses with
    # one "unreachable" line and tries again later; no exception reaches the CLI.
    from pykfk.mirror import runner
    monkeypatch.setattr(runner, "ANSWER_TIMEOUT_S", 0.5)
    config = parse_config({**BASE, "topics": "events"})
    mirror = runner.Mirror(config)
    real_ends, mirror.progress.ends = mirror.progress.ends, _LeaderPendingEnds(10**6, 0)  # type: ignore[assignment]
    try:
        with pytest.raises(TargetUnavailable, match="_UNKNOWN_PARTITION"):
            mirror._target_end("west.events", 0)
        pending = KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        assert unreachable(pending)
        # A record the producer could not queue for the same reason is fetched again.
        assert isinstance(mirror._produce_failure(("events", 0), "west.events", pending), TargetUnavailable)
    finally:
        mirror.progress.ends = real_ends
        mirror.close()


def test_admin_errors_count_as_unanswered_only_when_kafka_would_retry() -> None:
    from pykfk.client.connection import ConnectionError_
    from pykfk.errors import ErrorCode
    from pykfk.errors import KafkaError as AdminError

    assert unreachable(ConnectionError_("cannot connect to 127.0.0.1:1: refused"))
    assert unreachable(AdminError(ErrorCode.LEADER_NOT_AVAILABLE, "topic 'a'"))
    assert not unreachable(AdminError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "topic 'a'"))
    assert not unreachable(AdminError(ErrorCode.SASL_AUTHENTICATION_FAILED, "login"))


def test_the_mirror_makes_no_confluent_kafka_admin_client() -> None:
    """Its admin work goes through pykfk/client/admin.py (the end-to-end tests run the
    mirror where making confluent-kafka's AdminClient ends the process, helpers.py)."""
    import ast

    package = Path(__file__).resolve().parents[2] / "pykfk" / "mirror"
    found = []
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("confluent_kafka.admin"):
                found.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Import) and any(a.name.startswith("confluent_kafka.admin") for a in node.names):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found


def test_topic_sync_outlives_connections_the_broker_closes_when_idle(tmp_path: Path) -> None:
    """The mirror's admin connections sit idle between rounds (the controller's between
    two topics created): a broker closing them (connections.max.idle.ms) is no outage."""
    from pykfk.mirror.topics import TopicSync
    from pykfk.testing import BrokerProcess
    from tests.mirror.helpers import create_topic

    broker = BrokerProcess(str(tmp_path / "data"), {"connections.max.idle.ms": 1000}, log_level="WARNING").start()
    config = parse_config({**BASE, "source.bootstrap.servers": broker.bootstrap,
                           "target.bootstrap.servers": broker.bootstrap, "topics.regex": "orders|payments"})
    sync = TopicSync(config, ReplicationPolicy("default", "east", "west", "."))
    try:
        create_topic(broker.bootstrap, "orders", 2)
        sync.sync(sync.source_partitions())
        time.sleep(2.5)  # past connections.max.idle.ms: the broker closed every connection of the sync
        create_topic(broker.bootstrap, "payments", 3)
        sync.sync(sync.source_partitions())
        sync.refresh_target()
        assert {t: sync.target_partitions.get(t) for t in ("east.orders", "east.payments")} == {
            "east.orders": 2, "east.payments": 3}
    finally:
        sync.close()
        broker.stop()
