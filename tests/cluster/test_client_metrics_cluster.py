"""Client-metrics subscriptions (KIP-714) are cluster metadata: set through one broker of
a 3-broker ZooKeeper cluster, every broker asks clients for the same metrics; removed
through another, every broker stops asking; the subscription is a znode of Kafka's
config layout (``/config/client-metrics/<name>``) with a change notice."""

from __future__ import annotations

import json
import uuid
from typing import Any

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient, wait_until

CLIENT_METRICS = 16
SET, DELETE = 0, 1
INCREMENTAL_ALTER_CONFIGS, DESCRIBE_CONFIGS, GET_SUBSCRIPTIONS, LIST_CONFIG_RESOURCES = 44, 32, 71, 74
DEFAULT_INTERVAL_MS = 300_000


def _alter(client: RawClient, name: str, configs: dict[str, str | None]) -> list[int]:
    entries = [{"name": k, "config_operation": SET if v is not None else DELETE, "value": v} for k, v in configs.items()]
    answer = client.call(INCREMENTAL_ALTER_CONFIGS, 1, {
        "resources": [{"resource_type": CLIENT_METRICS, "resource_name": name, "configs": entries}],
        "validate_only": False})
    return [r.error_code for r in answer.responses]


def _asked_for(client: RawClient, instance: uuid.UUID) -> tuple[list[str], int]:
    """What the broker asks this client instance to push: metric prefixes, interval."""
    got = client.call(GET_SUBSCRIPTIONS, 0, {"client_instance_id": instance})
    assert got.error_code == ErrorCode.NONE
    return list(got.requested_metrics), got.push_interval_ms


def test_a_subscription_set_through_one_broker_applies_on_every_broker(cluster_factory: Any) -> None:
    cluster = cluster_factory(3)
    clients = {i: RawClient(b.host, b.port) for i, b in cluster.brokers.items()}
    try:
        # Each broker knows this client (an instance id of its own) before any subscription.
        instances = {i: clients[i].call(GET_SUBSCRIPTIONS, 0, {"client_instance_id": uuid.UUID(int=0)})
                     .client_instance_id for i in clients}
        assert all(_asked_for(clients[i], instances[i]) == ([], DEFAULT_INTERVAL_MS) for i in clients)

        # A bad subscription is refused and reaches no broker.
        assert _alter(clients[0], "bad", {"interval.ms": "5"}) == [ErrorCode.INVALID_CONFIG]
        assert _alter(clients[0], "producers", {"metrics": "org.apache.kafka.producer.",
                                                "interval.ms": "700"}) == [ErrorCode.NONE]
        data, _stat = cluster.zk.get(cluster.path("/config/client-metrics/producers"))
        assert json.loads(data) == {"version": 1, "config": {"metrics": "org.apache.kafka.producer.",
                                                             "interval.ms": "700"}}
        assert not cluster.zk.exists(cluster.path("/config/client-metrics/bad"))
        notices = [json.loads(cluster.zk.get(cluster.path(f"/config/changes/{n}"))[0])["entity_path"]
                   for n in cluster.zk.get_children(cluster.path("/config/changes"))]
        assert "client-metrics/producers" in notices

        wanted = (["org.apache.kafka.producer."], 700)
        for i in (1, 2):
            wait_until(lambda i=i: _asked_for(clients[i], instances[i]) == wanted, 10,
                       f"broker {i} asking for the subscription set through broker 0")
        described = clients[2].call(DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": CLIENT_METRICS, "resource_name": "producers",
                           "configuration_keys": ["interval.ms"]}],
            "include_synonyms": False, "include_documentation": False})
        assert [(c.name, c.value, c.config_source) for c in described.results[0].configs] == [("interval.ms", "700", 7)]
        listed = clients[1].call(LIST_CONFIG_RESOURCES, 1, {"resource_types": [CLIENT_METRICS]})
        assert [r.resource_name for r in listed.config_resources] == ["producers"]

        # Removed through broker 2 (every setting deleted): no broker asks any more.
        assert _alter(clients[2], "producers", {"metrics": None, "interval.ms": None}) == [ErrorCode.NONE]
        for i in (0, 1):
            wait_until(lambda i=i: _asked_for(clients[i], instances[i]) == ([], DEFAULT_INTERVAL_MS), 10,
                       f"broker {i} no longer asking")
        assert not clients[0].call(LIST_CONFIG_RESOURCES, 1, {"resource_types": [CLIENT_METRICS]}).config_resources
    finally:
        for client in clients.values():
            client.close()
