"""DescribeCluster: the brokers on the client's listener, the controller, the cluster id;
through kafka-python's admin client and raw requests (confluent-kafka asks Metadata)."""

from __future__ import annotations

from kafka.admin import KafkaAdminClient

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient


def test_describe_cluster_names_the_brokers_and_the_controller(pykfk_broker):
    admin = KafkaAdminClient(bootstrap_servers=pykfk_broker.bootstrap)
    try:
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    assert cluster["controller_id"] == 0 and cluster["cluster_id"]
    assert [(b["node_id"] if "node_id" in b else b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (0, "127.0.0.1", pykfk_broker.port)]
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        answer = raw.call(60, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1})
        assert answer.error_code == ErrorCode.NONE and answer.controller_id == 0
        assert answer.cluster_authorized_operations & (1 << 8)  # DESCRIBE, without an authorizer
        refused = raw.call(60, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert refused.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    finally:
        raw.close()
