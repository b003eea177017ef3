"""ElectLeaders with a real ZooKeeper and broker processes, through confluent-kafka's and
kafka-python's admin clients: the preferred replica gets its leadership back once, an
offline partition gets a live out-of-sync replica only through an unclean election, a
partition without any live replica has no eligible leader, unknown partitions; and a
standalone broker, which leads every partition already."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ElectionType, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient

from pykfk.errors import ErrorCode
from pykfk.testing import RawClient, wait_until

ELECT_KEY = 43


def elect(bootstrap: str, election: ElectionType, partitions: list[TopicPartition] | None) -> dict[Any, Any]:
    """confluent-kafka's elect_leaders: (topic, partition) -> None or the error code."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # (Timeouts as keyword arguments trip a bug in confluent-kafka 2.16's elect_leaders.)
    results = admin.elect_leaders(election, partitions).result(40)
    return {(tp.topic, tp.partition): None if error is None else error.code() for tp, error in results.items()}


@pytest.mark.timeout(240)
def test_preferred_and_unclean_elections_through_both_admin_clients(cluster_factory):
    cluster = cluster_factory(3)
    cluster.create_topic("pref", 1, 3)
    preferred = cluster.assignment("pref")[0][0]
    assert cluster.leader("pref", 0) == preferred
    # The preferred leader restarts: leadership moves away and stays away (no automatic
    # rebalancing within the test), while it catches up and rejoins the ISR.
    cluster.brokers[preferred].kill()
    wait_until(lambda: cluster.leader("pref", 0) not in (-1, preferred), 30, "another leader")
    cluster.brokers[preferred].start(timeout=60)
    cluster.wait_for_full_isr("pref", 1)
    assert cluster.leader("pref", 0) != preferred

    bootstrap = cluster.bootstrap
    assert elect(bootstrap, ElectionType.PREFERRED, [TopicPartition("pref", 0)]) == {("pref", 0): None}
    wait_until(lambda: cluster.leader("pref", 0) == preferred, 10, "the preferred leader back")
    assert elect(bootstrap, ElectionType.PREFERRED, [TopicPartition("pref", 0)]) == {
        ("pref", 0): KafkaError.ELECTION_NOT_NEEDED}
    assert elect(bootstrap, ElectionType.PREFERRED, [TopicPartition("pref", 7)]) == {
        ("pref", 7): KafkaError.UNKNOWN_TOPIC_OR_PART}

    # "two" on [a, b]: b stops, then a; b comes back alone, out of sync: the partition
    # stays offline (unclean.leader.election.enable is false) until an unclean election.
    cluster.create_topic("two", 1, 2)
    a, b = cluster.assignment("two")[0]
    cluster.brokers[b].stop()
    wait_until(lambda: cluster.isr("two", 0) == [a], 30, "the ISR down to its leader")
    cluster.brokers[a].kill()
    wait_until(lambda: cluster.leader("two", 0) == -1, 30, "the partition offline")
    cluster.brokers[b].start(timeout=60)
    alive = ",".join(p.bootstrap for i, p in cluster.brokers.items() if i != a)
    wait_until(lambda: cluster.controller() not in (-1, a), 30, "a live controller")
    assert cluster.leader("two", 0) == -1
    kafka_admin = KafkaAdminClient(bootstrap_servers=alive, request_timeout_ms=30000)
    try:
        response = kafka_admin.elect_leaders(1, {"two": [0]})
    finally:
        kafka_admin.close()
    results = {(r.topic, p.partition_id): p.error_code for r in response.replica_election_results
               for p in r.partition_result}
    assert results == {("two", 0): 0}
    wait_until(lambda: cluster.leader("two", 0) == b and cluster.isr("two", 0) == [b], 10, "b elected uncleanly")

    # A partition with a live leader needs no unclean election.
    assert elect(alive, ElectionType.UNCLEAN, [TopicPartition("two", 0)]) == {("two", 0): KafkaError.ELECTION_NOT_NEEDED}


@pytest.mark.timeout(120)
def test_a_partition_without_any_live_replica_has_no_eligible_leader(cluster_factory):
    cluster = cluster_factory(2)
    cluster.create_topic("solo", 2, 1)
    owner = cluster.assignment("solo")[0][0]
    survivor = next(b for b in cluster.brokers if b != owner)
    cluster.brokers[owner].kill()
    wait_until(lambda: cluster.leader("solo", 0) == -1 and cluster.controller() == survivor, 30,
               "the partition offline and a live controller")
    results = elect(cluster.brokers[survivor].bootstrap, ElectionType.UNCLEAN, [TopicPartition("solo", 0)])
    assert results == {("solo", 0): KafkaError.ELIGIBLE_LEADERS_NOT_AVAILABLE}
    assert cluster.leader("solo", 0) == -1


def test_a_standalone_broker_leads_everything_already(pykfk_broker):
    from confluent_kafka.admin import NewTopic

    admin = AdminClient({"bootstrap.servers": pykfk_broker.bootstrap})
    admin.create_topics([NewTopic("mine", 2, 1)])["mine"].result(30)
    everything = [TopicPartition("mine", 0), TopicPartition("mine", 1)]
    assert elect(pykfk_broker.bootstrap, ElectionType.PREFERRED, everything) == {
        ("mine", 0): KafkaError.ELECTION_NOT_NEEDED, ("mine", 1): KafkaError.ELECTION_NOT_NEEDED}
    assert elect(pykfk_broker.bootstrap, ElectionType.UNCLEAN, [TopicPartition("nope", 0)]) == {
        ("nope", 0): KafkaError.UNKNOWN_TOPIC_OR_PART}
    raw = RawClient(pykfk_broker.host, pykfk_broker.port)
    try:
        # v0 (always preferred, no top-level error) and a null list: every partition.
        v0 = raw.call(ELECT_KEY, 0, {"topic_partitions": None, "timeout_ms": 1000})
        codes = {(r.topic, p.partition_id): p.error_code for r in v0.replica_election_results
                 for p in r.partition_result}
        assert codes == {("mine", 0): ErrorCode.ELECTION_NOT_NEEDED, ("mine", 1): ErrorCode.ELECTION_NOT_NEEDED}
        bad = raw.call(ELECT_KEY, 2, {"election_type": 5, "topic_partitions": [{"topic": "mine", "partitions": [0]}],
                                      "timeout_ms": 1000})
        assert bad.replica_election_results[0].partition_result[0].error_code == ErrorCode.INVALID_REQUEST
    finally:
        raw.close()
