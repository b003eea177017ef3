"""Client telemetry (KIP-714): a client-metrics subscription set with
IncrementalAlterConfigs, confluent-kafka pushing its producer metrics when the broker
asks, the metrics in a Prometheus scrape with the client's labels; hostile pushes get
Kafka's error codes."""

from __future__ import annotations

import time
import urllib.request
import uuid
from typing import Any

import confluent_kafka
import cramjam
import pytest

from pykfk.errors import ErrorCode
from pykfk.testing import InProcessBroker, RawClient, free_port

CLIENT_METRICS = 16
SET = 0
GET_SUBSCRIPTIONS, PUSH, LIST_CONFIG_RESOURCES = 71, 72, 74


@pytest.fixture(scope="module")
def broker(tmp_path_factory: Any) -> Any:
    port = free_port()
    broker = InProcessBroker(str(tmp_path_factory.mktemp("telemetry") / "data"),
                             {"metrics.listener": f"http://127.0.0.1:{port}", "num.partitions": 1,
                              "offsets.topic.replication.factor": 1}).start()
    broker.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield broker
    broker.stop()
    assert not broker.loop_errors


@pytest.fixture
def raw(broker: Any) -> Any:
    client = RawClient(broker.host, broker.port)
    yield client
    client.close()


def _alter(raw: Any, name: str, configs: dict[str, str]) -> list[int]:
    resource = {"resource_type": CLIENT_METRICS, "resource_name": name,
                "configs": [{"name": k, "config_operation": SET, "value": v} for k, v in configs.items()]}
    answer = raw.call(44, 1, {"resources": [resource], "validate_only": False})
    return [r.error_code for r in answer.responses]


def _scrape(broker: Any) -> str:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as response:
        return response.read().decode()


def test_confluent_kafka_pushes_its_subscribed_metrics_to_the_prometheus_endpoint(broker: Any, raw: Any) -> None:
    # Bad subscriptions are refused and change nothing.
    assert _alter(raw, "bad-interval", {"interval.ms": "10"}) == [ErrorCode.INVALID_CONFIG]
    assert _alter(raw, "bad-match", {"match": "no_such_key=x"}) == [ErrorCode.INVALID_CONFIG]
    assert _alter(raw, "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "500",
                                     "match": "client_software_name=.*"}) == [ErrorCode.NONE]
    described = raw.call(32, 4, {"resources": [{"resource_type": CLIENT_METRICS, "resource_name": "producers",
                                                "configuration_keys": None}],
                                 "include_synonyms": False, "include_documentation": False})
    values = {c.name: (c.value, c.config_source) for c in described.results[0].configs}
    assert values["interval.ms"] == ("500", 7) and values["metrics"] == ("org.apache.kafka.producer.", 7)
    listed = raw.call(LIST_CONFIG_RESOURCES, 0, {})
    assert [r.resource_name for r in listed.config_resources] == ["producers"]
    listed = raw.call(LIST_CONFIG_RESOURCES, 1, {"resource_types": [CLIENT_METRICS]})
    assert [(r.resource_type, r.resource_name) for r in listed.config_resources] == [(CLIENT_METRICS, "producers")]
    everything = raw.call(LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
    listed_all = {(r.resource_type, r.resource_name) for r in everything.config_resources}
    assert {(CLIENT_METRICS, "producers"), (4, "0"), (8, "0")} <= listed_all
    assert raw.call(LIST_CONFIG_RESOURCES, 1, {"resource_types": [99]}).error_code == ErrorCode.UNSUPPORTED_VERSION

    producer = confluent_kafka.Producer({"bootstrap.servers": f"{broker.host}:{broker.port}",
                                         "client.id": "telemetry-producer", "linger.ms": 5})
    deadline = time.monotonic() + 20
    found: list[str] = []
    while time.monotonic() < deadline and not found:
        for _ in range(50):
            producer.produce("telemetry", b"v" * 100)
        producer.flush(5)
        text = _scrape(broker)
        found = [line for line in text.splitlines()
                 if line.startswith("org_apache_kafka_producer_") and 'client_id="telemetry-producer"' in line]
        time.sleep(0.3)
    producer.flush(5)
    assert found, "no producer metrics in the scrape"
    line = found[0]
    assert 'client_software_name="confluent-kafka-python"' in line or 'client_software_name="librdkafka"' in line
    assert "client_instance_id=" in line and "client_software_version=" in line
    # Only what the subscription asked for.
    assert not [m for m in text.splitlines() if m.startswith("org_apache_kafka_consumer_")]


def test_hostile_pushes_get_kafkas_error_codes(broker: Any, raw: Any) -> None:
    got = raw.call(GET_SUBSCRIPTIONS, 0, {"client_instance_id": uuid.UUID(int=0)})
    assert got.error_code == 0 and got.client_instance_id != uuid.UUID(int=0)
    assert list(got.accepted_compression_types) == [4, 3, 1, 2] and got.telemetry_max_bytes == 1 << 20
    instance, subscription = got.client_instance_id, got.subscription_id

    def push(**body: Any) -> int:
        # Each push follows a GetTelemetrySubscriptions: pushes sooner than the interval are throttled.
        raw.call(GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance})
        return push_now(**body)

    def push_now(**body: Any) -> int:
        request = {"client_instance_id": instance, "subscription_id": subscription, "terminating": False,
                   "compression_type": 0, "metrics": b"", **body}
        return raw.call(PUSH, 0, request).error_code

    assert push(client_instance_id=uuid.UUID(int=0)) == ErrorCode.INVALID_REQUEST
    assert push(client_instance_id=uuid.uuid4()) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert push(subscription_id=subscription + 1) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    assert push(compression_type=9) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    assert push(metrics=b"\x00" * ((1 << 20) + 1)) == ErrorCode.TELEMETRY_TOO_LARGE
    assert push(metrics=b"\xff\xff\xff garbage") == ErrorCode.INVALID_RECORD
    assert push(metrics=b"\x28\xb5\x2f\xfd broken zstd", compression_type=4) == ErrorCode.INVALID_RECORD
    # 2 KiB of zstd that would expand to 64 MiB: refused without expanding it all.
    bomb = bytes(cramjam.zstd.compress(bytes(64 << 20)))
    assert len(bomb) < 1 << 20 and push(metrics=bomb, compression_type=4) == ErrorCode.INVALID_RECORD
    assert push() == ErrorCode.NONE
    assert push_now() == ErrorCode.THROTTLING_QUOTA_EXCEEDED  # a second push within the interval
    # A changed subscription changes the id: the old one is refused.
    assert _alter(raw, "everything", {"metrics": "*", "interval.ms": "1000"}) == [ErrorCode.NONE]
    again = raw.call(GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance})
    assert again.client_instance_id == instance and again.subscription_id != subscription
    assert push() == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    subscription = again.subscription_id
    assert push_now(terminating=True) == ErrorCode.NONE  # never throttled
    assert push_now() == ErrorCode.INVALID_REQUEST  # nothing after the terminating push
    # The broker still serves.
    assert raw.call(18, 3, {"client_software_name": "raw", "client_software_version": "1"}).error_code == 0
