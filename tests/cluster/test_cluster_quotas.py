"""Client quotas in a ZooKeeper cluster: set through one broker, stored in Kafka's
znodes next to SCRAM credentials of the same user, seen by every broker."""

from __future__ import annotations

import json

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient, wait_until


def _described(broker) -> dict:
    raw = RawClient(broker.host, broker.port)
    try:
        answer = raw.call(48, 1, {"components": [], "strict": False})
    finally:
        raw.close()
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry["values"]}
            for entry in answer.entries}


def test_quotas_set_through_one_broker_reach_every_broker(cluster_factory):
    cluster = cluster_factory(2)
    admin = AdminClient({"bootstrap.servers": cluster.brokers[0].bootstrap})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion("dora", info, b"pw")])["dora"].result(20)
    raw = RawClient(cluster.brokers[0].host, cluster.brokers[0].port)
    try:
        answer = raw.call(49, 1, {"entries": [
            {"entity": [{"entity_type": "user", "entity_name": "dora"}],
             "ops": [{"key": "producer_byte_rate", "value": 5000.0, "remove": False}]},
            {"entity": [{"entity_type": "client-id", "entity_name": None}],
             "ops": [{"key": "consumer_byte_rate", "value": 7000.0, "remove": False}]}], "validate_only": False})
        assert [e.error_code for e in answer.entries] == [ErrorCode.NONE, ErrorCode.NONE]
    finally:
        raw.close()
    expected = {(("user", "dora"),): {"producer_byte_rate": 5000.0},
                (("client-id", None),): {"consumer_byte_rate": 7000.0}}
    wait_until(lambda: _described(cluster.brokers[1]) == expected, 5, "the quotas on broker 1")
    user_doc = json.loads(cluster.zk.get(cluster.path("/config/users/dora"))[0])["config"]
    assert user_doc["producer_byte_rate"] == "5000" and "SCRAM-SHA-256" in user_doc  # both kept
    assert cluster.zk.exists(cluster.path("/config/clients/<default>"))
