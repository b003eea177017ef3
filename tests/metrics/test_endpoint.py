"""The broker's /metrics endpoint: off unless configured, Kafka's names, counters that
follow produced and fetched records, requests per API and version, request times,
log sizes, groups and lag, connections."""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from pykfk.config import BrokerConfig, ConfigError
from pykfk.testing import InProcessBroker, free_port, wait_until

from .promtools import parse, scrape, total, value

TOPIC = "metered"
RECORDS = 200
VALUE = b"v" * 50


def _produce(bootstrap: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    for i in range(count):
        producer.produce(TOPIC, VALUE, key=b"%d" % i, partition=i % 2)
        producer.poll(0)
    assert producer.flush(20) == 0


def _consume_and_commit(bootstrap: str, group: str, count: int) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen += 1
        assert seen == count
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: Any) -> Any:
    port = free_port()
    broker = InProcessBroker(str(tmp_path_factory.mktemp("metrics") / "data"),
                             {"metrics.listener": f"http://127.0.0.1:{port}", "num.partitions": 2,
                              "offsets.topic.replication.factor": 1}).start()
    broker.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield broker
    broker.stop()
    assert not broker.loop_errors


def test_off_by_default() -> None:
    from pykfk.broker import Broker

    assert BrokerConfig({})["metrics.listener"] == ""
    # Without the endpoint requests are counted, never timed (no clock reads for them).
    assert Broker(BrokerConfig({})).request_stats.timing is False
    assert Broker(BrokerConfig({"metrics.listener": "http://127.0.0.1:0"})).request_stats.timing is True


@pytest.mark.parametrize("bad", ["127.0.0.1:9404", "https://127.0.0.1:9404", "http://127.0.0.1",
                                 "http://:9404", "http://127.0.0.1:9404/metrics", "http://h:99999"])
def test_bad_listener_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match="metrics.listener"):
        BrokerConfig({"metrics.listener": bad})


def test_counters_follow_produce_and_fetch(broker: Any) -> None:
    before = parse(scrape(broker.metrics_url))
    assert total(before, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 0
    _produce(broker.bootstrap, RECORDS)
    produced = parse(scrape(broker.metrics_url))
    assert value(produced, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == RECORDS
    bytes_in = value(produced, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC)
    assert bytes_in >= RECORDS * len(VALUE)
    assert value(produced, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) == 0
    sizes = [value(produced, "kafka_log_log_size", topic=TOPIC, partition=str(p)) for p in (0, 1)]
    assert sum(sizes) == bytes_in  # the batches as produced are the bytes on disk
    assert value(produced, "kafka_log_log_logendoffset", topic=TOPIC, partition="0") == RECORDS // 2

    _consume_and_commit(broker.bootstrap, "readers", RECORDS)
    fetched = parse(scrape(broker.metrics_url))
    # Every record was sent once at least; a consumer may fetch a batch twice.
    assert value(fetched, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) >= bytes_in
    assert value(fetched, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == RECORDS
    # The committed offsets are the end offsets: no lag.
    for partition in ("0", "1"):
        key = {"group": "readers", "topic": TOPIC, "partition": partition}
        assert value(fetched, "kafka_consumergroup_current_offset", **key) == RECORDS // 2
        assert value(fetched, "kafka_consumergroup_lag", **key) == 0
    assert total(fetched, "kafka_coordinator_group_groupmetadatamanager_numgroups") >= 1

    _produce(broker.bootstrap, 10)
    lagging = parse(scrape(broker.metrics_url))
    lag = sum(value(lagging, "kafka_consumergroup_lag", group="readers", topic=TOPIC, partition=p)
              for p in ("0", "1"))
    assert lag == 10


def test_requests_per_api_and_version(broker: Any) -> None:
    # One Produce request at a time: the broker times at most one read a millisecond.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 1, "linger.ms": 0})
    for i in range(50):
        producer.produce(TOPIC, VALUE, partition=i % 2)
        assert producer.flush(10) == 0
    samples = parse(scrape(broker.metrics_url))
    produce = {dict(labels)["version"]: v for (name, labels), v in samples.items()
               if name == "kafka_network_requestmetrics_requests_total" and dict(labels)["request"] == "Produce"}
    assert produce and all(v > 0 for v in produce.values())
    assert total(samples, "kafka_network_requestmetrics_requests_total", request="Metadata") > 0
    assert total(samples, "kafka_network_requestmetrics_requests_total", request="ApiVersions") > 0
    # Timed requests (a sample at most a millisecond apart) have every part filed once.
    count = value(samples, "kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert 0 < count <= sum(produce.values())
    for part in ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems",
                 "responsesendtimems"):
        assert value(samples, f"kafka_network_requestmetrics_{part}_count", request="Produce") == count
    assert value(samples, "kafka_network_requestmetrics_totaltimems_bucket", request="Produce", le="+Inf") == count
    assert value(samples, "kafka_network_requestmetrics_totaltimems_sum", request="Produce") > 0


def test_cluster_state_gauges(broker: Any) -> None:
    samples = parse(scrape(broker.metrics_url))
    # A standalone broker is its own controller, leads everything, all in sync.
    assert value(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(samples, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(samples, "kafka_server_replicamanager_leadercount") >= 2
    assert value(samples, "kafka_server_replicamanager_isrshrinks_total") == 0
    assert value(samples, "kafka_log_logflushstats_logflushrateandtimems_count") >= 0
    assert "process_cpu_seconds_total" in {name for name, _labels in samples}


def test_connections(broker: Any) -> None:
    listener = "PLAINTEXT"
    before = parse(scrape(broker.metrics_url))
    with socket.create_connection((broker.host, broker.port)):
        wait_until(lambda: value(parse(scrape(broker.metrics_url)),
                               "kafka_server_socketservermetrics_connection_count", listener=listener)
                 > value(before, "kafka_server_socketservermetrics_connection_count", listener=listener), 10, "the connection to be counted", 0.05)
    after = parse(scrape(broker.metrics_url))
    assert (value(after, "kafka_server_socketservermetrics_connection_creation_total", listener=listener)
            > value(before, "kafka_server_socketservermetrics_connection_creation_total", listener=listener))


def test_http_errors(broker: Any) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(broker.metrics_url.replace("/metrics", "/nope"), timeout=10)
    assert missing.value.code == 404
    # A client that sends nothing useful is closed; the endpoint keeps serving.
    with socket.create_connection((broker.host, int(broker.metrics_url.split(":")[2].split("/")[0]))) as s:
        s.sendall(b"x" * 100_000)
        s.settimeout(10)
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
    assert "kafka_server" in scrape(broker.metrics_url)


def test_throttle_time(broker: Any) -> None:
    from pykfk.testing import RawClient

    raw = RawClient(broker.host, broker.port)
    try:
        answer = raw.call(49, 1, {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": "throttled"}],
                                               "ops": [{"key": "producer_byte_rate", "value": 100_000.0,
                                                        "remove": False}]}],
                                  "validate_only": False})
        assert answer.entries[0].error_code == 0
    finally:
        raw.close()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "throttled", "linger.ms": 50})
    for _ in range(30):
        producer.produce(TOPIC, b"t" * 10_000)
    assert producer.flush(60) == 0
    samples = parse(scrape(broker.metrics_url))
    assert value(samples, "kafka_server_throttle_time_ms_total", quota_type="Produce") > 0
    assert value(samples, "kafka_server_throttled_responses_total", quota_type="Produce") >= 1
