"""CreateTopics with an explicit replica assignment puts each partition's replicas on
the brokers named, the first of them the leader (3-broker ZooKeeper cluster, broker
processes, confluent-kafka's AdminClient and the ``pykfk`` command)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from pykfk.testing import wait_until

pytestmark = pytest.mark.timeout(120)


def _placed(cluster, topic: str, partitions: int) -> dict[int, list[int]]:
    wait_until(lambda: all(cluster.leader(topic, p) >= 0 for p in range(partitions)), 30, f"leaders of {topic}")
    return cluster.assignment(topic)


def test_explicit_replica_assignments_are_kept(cluster_factory) -> None:
    cluster = cluster_factory(3)
    wanted = [[2, 0], [1, 2], [0, 1]]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("placed", num_partitions=len(wanted), replica_assignment=wanted)], request_timeout=20)["placed"].result(30)
    assert _placed(cluster, "placed", 3) == dict(enumerate(wanted))
    assert [cluster.leader("placed", p) for p in range(3)] == [2, 1, 0]

    # kafka-topics.sh's --replica-assignment form: partitions by ',', replicas by ':'.
    command = [sys.executable, "-m", "pykfk.cli.main", "--bootstrap-server", cluster.bootstrap,
               "topic", "create", "by-cli", "--replica-assignment", "1:0,0:2"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _placed(cluster, "by-cli", 2) == {0: [1, 0], 1: [0, 2]}
