"""Metrics of a two-broker ZooKeeper cluster: one active controller, replication bytes
on both sides, the ISR shrinking when a follower dies and growing when it is back, a
leader election when the leader dies."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Producer

from pykfk.testing import wait_until
from tests.cluster.conftest import Cluster

from .promtools import Samples, scrape_broker, total, value

TOPIC = "replicated"


def _scrape(cluster: Cluster, broker_id: int) -> Samples:
    return scrape_broker(cluster.brokers[broker_id])


@pytest.mark.timeout(240)
def test_cluster_metrics(tmp_path: Any, zookeeper_server: Any) -> None:
    cluster = Cluster(str(tmp_path), zookeeper_server, 2, {"metrics.listener": "http://127.0.0.1:0"})
    try:
        cluster.start()
        cluster.create_topic(TOPIC, 1, 2)
        cluster.wait_for_full_isr(TOPIC, 1)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(100):
            producer.produce(TOPIC, b"%d" % i)
        assert producer.flush(30) == 0
        leader = cluster.leader(TOPIC, 0)
        (follower,) = (b for b in cluster.brokers if b != leader)
        wait_until(lambda: total(_scrape(cluster, follower), "kafka_log_log_logendoffset", topic=TOPIC) == 100,
                   30, "the follower to have every record")

        on_leader, on_follower = _scrape(cluster, leader), _scrape(cluster, follower)
        assert sum(value(s, "kafka_controller_kafkacontroller_activecontrollercount")
                   for s in (on_leader, on_follower)) == 1
        assert value(on_leader, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 100
        sent = value(on_leader, "kafka_server_brokertopicmetrics_replicationbytesout_total", topic=TOPIC)
        received = value(on_follower, "kafka_server_brokertopicmetrics_replicationbytesin_total", topic=TOPIC)
        size = value(on_leader, "kafka_log_log_size", topic=TOPIC, partition="0")
        assert received == size == value(on_follower, "kafka_log_log_size", topic=TOPIC, partition="0")
        assert sent >= received
        assert value(on_follower, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == 0
        assert value(on_leader, "kafka_server_replicamanager_underreplicatedpartitions") == 0

        # A dead follower leaves the ISR: the partition is under-replicated on its leader.
        cluster.brokers[follower].kill()
        wait_until(lambda: value(_scrape(cluster, leader), "kafka_server_replicamanager_underreplicatedpartitions")
                   == 1, 60, "the leader to count an under-replicated partition")
        shrunk = _scrape(cluster, leader)
        assert value(shrunk, "kafka_server_replicamanager_isrshrinks_total") >= 1
        # Back, it catches up and joins the ISR again.
        cluster.brokers[follower].start(timeout=60)
        wait_until(lambda: value(_scrape(cluster, leader), "kafka_server_replicamanager_isrexpands_total") >= 1,
                   60, "the ISR to grow back")
        cluster.wait_for_full_isr(TOPIC, 1)
        assert value(_scrape(cluster, leader), "kafka_server_replicamanager_underreplicatedpartitions") == 0

        # The leader dies: the controller (the other broker, by now or already) elects it.
        cluster.brokers[leader].kill()
        wait_until(lambda: cluster.leader(TOPIC, 0) == follower, 60, "a new leader")
        survivor = _scrape(cluster, follower)
        assert value(survivor, "kafka_controller_kafkacontroller_activecontrollercount") == 1
        assert value(survivor, "kafka_controller_controllerstats_leaderelections_total") >= 1
        assert value(survivor, "kafka_server_replicamanager_leadercount") >= 1
    finally:
        cluster.close()
