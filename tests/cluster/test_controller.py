"""Membership and the controller with a real ZooKeeper: controller failover and its epoch,
duplicate broker ids, a ZooKeeper session expiry, controlled shutdown, preferred leaders,
topic deletion."""

from __future__ import annotations

import os
import time

import pytest

from pykfk.testing import BrokerProcess, InProcessBroker, wait_until
from tests.cluster.conftest import CLUSTER_DEFAULTS

SESSION_S = CLUSTER_DEFAULTS["zookeeper.session.timeout.ms"] / 1000


def produce(bootstrap: str, topic: str, count: int, acks: str = "all") -> list:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": 30000})
    results: list = []
    for i in range(count):
        producer.produce(topic, key=b"%d" % i, value=b"v%d" % i, on_delivery=lambda err, msg: results.append(err))
    assert producer.flush(40) == 0
    return results


@pytest.mark.timeout(120)
def test_controller_failover_bumps_the_epoch(cluster_factory):
    cluster = cluster_factory(3)
    first = cluster.controller()
    epoch = cluster.controller_epoch()
    killed_at = time.monotonic()
    cluster.brokers[first].kill()
    successor = wait_until(lambda: (c := cluster.controller()) not in (-1, first) and (c,), SESSION_S + 10,
                           "another controller")[0]
    took = time.monotonic() - killed_at
    # The session timeout is when ZooKeeper notices; the rest is one election round.
    assert took < SESSION_S + 5, took
    # The winner bumps /controller_epoch right after taking /controller.
    wait_until(lambda: cluster.controller_epoch() > epoch, 5, "the controller epoch bumped")
    # The new controller does the controller's work: leaders for a new topic.
    cluster.create_topic("after-failover", 3, 2)
    assert {cluster.leader("after-failover", p) for p in range(3)} <= {b for b in cluster.brokers if b != first}
    cluster.brokers[first].start(timeout=60)
    wait_until(lambda: first in cluster.registered(), 30, "the old controller back as a broker")
    assert cluster.controller() == successor


@pytest.mark.timeout(120)
def test_duplicate_broker_id_fails_to_start(cluster_factory, tmp_path):
    cluster = cluster_factory(1)
    twin = BrokerProcess(str(tmp_path / "twin"), {"broker.id": 0, "zookeeper.connect": cluster.connect,
                                                 "zookeeper.session.timeout.ms": 3000})
    with pytest.raises(RuntimeError) as failure:
        twin.start(timeout=60)
    assert "broker.id 0 is already registered in ZooKeeper" in str(failure.value)
    assert twin.proc is not None and twin.proc.returncode == 1
    assert cluster.brokers[0].is_running() and cluster.registered() == {0}


@pytest.mark.timeout(150)
def test_broker_comes_back_after_session_expiry(cluster_factory, zookeeper_server, tmp_path):
    cluster = cluster_factory(2)
    settings = {**CLUSTER_DEFAULTS, "zookeeper.connect": cluster.connect, "broker.id": 2}
    inproc = InProcessBroker(str(tmp_path / "inproc"), settings).start()
    try:
        wait_until(lambda: cluster.registered() == {0, 1, 2}, 30, "three brokers")
        topic = "expiry"
        cluster.create_topic(topic, 3, 3, **{"min.insync.replicas": 2})
        cluster.wait_for_full_isr(topic, 3)
        assert produce(inproc.bootstrap, topic, 50) == [None] * 50
        led_before = {p for p in range(3) if cluster.leader(topic, p) == 2}

        store = inproc.broker.cluster.store
        old_session, password = store.session_credentials()
        zookeeper_server.expire_session(old_session, password)  # same session id, then close

        def registered_again() -> bool:
            stat = cluster.zk.exists(cluster.path("/brokers/ids/2"))
            return stat is not None and stat.ephemeralOwner not in (0, old_session)

        wait_until(registered_again, 30, "broker 2 registered under a new session")
        # The controller saw it leave: it lost its leaderships and ISR places, and earns
        # them back by catching up.
        cluster.wait_for_full_isr(topic, 3, timeout=60)
        for p in led_before:
            state = cluster.state(topic, p)
            assert state is not None and state["leader_epoch"] >= 1
        assert produce(cluster.bootstrap, topic, 50) == [None] * 50
    finally:
        inproc.stop()
    assert not inproc.loop_errors, inproc.loop_errors


@pytest.mark.timeout(180)
def test_controlled_shutdown_rebalance_and_deletion(cluster_factory):
    cluster = cluster_factory(3, **{"leader.imbalance.check.interval.seconds": 2})
    topic = "moves"
    cluster.create_topic(topic, 3, 3)
    cluster.wait_for_full_isr(topic, 3)
    preferred = {p: r[0] for p, r in cluster.assignment(topic).items()}
    assert all(cluster.leader(topic, p) == preferred[p] for p in range(3))
    assert produce(cluster.bootstrap, topic, 30) == [None] * 30

    # SIGTERM: the broker hands its leaderships over before it exits.
    victim = preferred[0]
    assert cluster.brokers[victim].stop() == 0
    assert "controlled shutdown done" in cluster.brokers[victim].log_text()
    for p in range(3):
        assert cluster.leader(topic, p) not in (victim, -1)
        assert victim not in cluster.isr(topic, p)

    # Back, caught up, and the preferred leader election gives it its partitions again.
    cluster.brokers[victim].start(timeout=60)
    wait_until(lambda: all(cluster.leader(topic, p) == preferred[p] for p in range(3)), 60,
               "preferred leaders restored")

    # Deletion through the controller: znodes and every replica's log go.
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic], request_timeout=30)[topic].result(40)
    assert cluster.zk.exists(cluster.path(f"/brokers/topics/{topic}")) is None

    def logs_gone() -> bool:
        return not any(
            os.path.isdir(os.path.join(b.log_dir, f"{topic}-{p}")) for b in cluster.brokers.values() for p in range(3)
        )

    wait_until(logs_gone, 30, "replica logs deleted")
    assert topic not in admin.list_topics(timeout=10).topics
