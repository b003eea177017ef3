"""Fetching from the closest replica (KIP-392): in a 3-broker cluster with racks a, b
and c and Kafka's RackAwareReplicaSelector, a confluent-kafka consumer with
client.rack set to a follower's rack is sent to that follower by the leader
(preferred_read_replica) and reads every record from it; the follower's metrics show
the bytes it served."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from pykfk.testing import RawClient, wait_until
from tests.cluster.conftest import Cluster
from tests.metrics.promtools import scrape_broker, value

TOPIC = "racked"
RACKS = {0: "a", 1: "b", 2: "c"}
SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def _bytes_out(cluster: Cluster, broker_id: int) -> float:
    return value(scrape_broker(cluster.brokers[broker_id]), "kafka_server_brokertopicmetrics_bytesout_total",
                 topic=TOPIC)


def _fetch_v11(broker: Any, rack: str) -> Any:
    raw = RawClient(broker.host, broker.port)
    try:
        return raw.call(1, 11, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": rack,
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        }).responses[0].partitions[0]
    finally:
        raw.close()


@pytest.mark.timeout(240)
def test_a_consumer_reads_from_the_replica_in_its_rack(tmp_path: Any, zookeeper_server: Any) -> None:
    cluster = Cluster(str(tmp_path), zookeeper_server, 3, {"metrics.listener": "http://127.0.0.1:0",
                                                          "replica.selector.class": SELECTOR})
    for broker_id, rack in RACKS.items():
        cluster.brokers[broker_id].overrides["broker.rack"] = rack
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1, 3)
        cluster.wait_for_full_isr(TOPIC, 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(500):
            producer.produce(TOPIC, b"%04d" % i)
        assert producer.flush(30) == 0
        leader = cluster.leader(TOPIC, 0)
        follower = (leader + 1) % 3
        rack = RACKS[follower]

        # The leader points a v11 consumer in the follower's rack there, and serves its own rack itself.
        redirected = _fetch_v11(cluster.brokers[leader], rack)
        assert redirected.preferred_read_replica == follower and not redirected.records
        local = _fetch_v11(cluster.brokers[leader], RACKS[leader])
        assert local.preferred_read_replica == -1 and local.records

        before = _bytes_out(cluster, follower)
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "racked", "client.rack": rack,
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([TOPIC])
        seen: list[bytes] = []
        try:
            wait_until(lambda: _poll_into(consumer, seen) >= 500, 60, "every record")
        finally:
            consumer.close()
        assert seen == [b"%04d" % i for i in range(500)]
        assert _bytes_out(cluster, follower) - before >= 500 * 4  # the follower served the records
    finally:
        cluster.close()


def _poll_into(consumer: Consumer, seen: list[bytes]) -> int:
    message = consumer.poll(0.2)
    if message is not None and not message.error():
        seen.append(message.value())
    return len(seen)
