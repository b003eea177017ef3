"""Dynamic broker settings in a ZooKeeper cluster: the cluster-wide default set through
one broker reaches every broker, a broker's own setting only that broker, both stored
where Kafka keeps them (/config/brokers/<default> and /config/brokers/<id>) with a
change notice."""

from __future__ import annotations

import json

from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient, wait_until

DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3


def _source_and_value(broker, broker_id: int, name: str) -> tuple[int, str]:
    raw = RawClient(broker.host, broker.port)
    try:
        answer = raw.call(32, 1, {"resources": [{"resource_type": 4, "resource_name": str(broker_id),
                                                 "configuration_keys": [name]}], "include_synonyms": False})
    finally:
        raw.close()
    entry = answer.results[0].configs[0]
    return entry.config_source, entry.value


def test_default_and_per_broker_settings_reach_the_right_brokers(cluster_factory):
    cluster = cluster_factory(2)
    first, second = cluster.brokers[0], cluster.brokers[1]
    raw = RawClient(first.host, first.port)
    try:
        answer = raw.call(44, 1, {"resources": [{"resource_type": 4, "resource_name": "", "configs": [
            {"name": "log.retention.bytes", "config_operation": 0, "value": "5000000"}]}], "validate_only": False})
        assert answer.responses[0].error_code == ErrorCode.NONE
    finally:
        raw.close()
    wait_until(lambda: _source_and_value(second, 1, "log.retention.bytes") == (DYNAMIC_DEFAULT_BROKER_CONFIG, "5000000"),
               5, "broker 1 taking the cluster default")

    admin = AdminClient({"bootstrap.servers": second.bootstrap})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[
        ConfigEntry("log.retention.bytes", "7000000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(20)
    assert _source_and_value(second, 1, "log.retention.bytes") == (DYNAMIC_BROKER_CONFIG, "7000000")
    assert _source_and_value(first, 0, "log.retention.bytes") == (DYNAMIC_DEFAULT_BROKER_CONFIG, "5000000")

    default_doc = json.loads(cluster.zk.get(cluster.path("/config/brokers/<default>"))[0])
    assert default_doc == {"version": 1, "config": {"log.retention.bytes": "5000000"}}
    assert json.loads(cluster.zk.get(cluster.path("/config/brokers/1"))[0])["config"] == {
        "log.retention.bytes": "7000000"}
    notices = [json.loads(cluster.zk.get(cluster.path(f"/config/changes/{c}"))[0])["entity_path"]
               for c in cluster.zk.get_children(cluster.path("/config/changes"))]
    assert {"brokers/<default>", "brokers/1"} <= set(notices)
