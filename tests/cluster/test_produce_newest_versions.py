"""Produce v13 and ListOffsets v10 (Kafka 4.1's newest) as raw requests against a
two-broker cluster: topics named by id (KIP-516), a partition sent to a broker that does
not lead it answered with where its leader is (KIP-951), an unknown id answered
UNKNOWN_TOPIC_ID, and the stored records listed by offset."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pykfk._core.records import build_batch
from pykfk.errors import ErrorCode
from pykfk.testing import RawClient, wait_until

PRODUCE, LIST_OFFSETS, METADATA = 0, 2, 3
TOPIC = "by-id"


def _topic_id(client: RawClient, name: str) -> uuid.UUID:
    response: Any = client.call(METADATA, 12, {"topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
                                               "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.NONE
    return topic.topic_id


def _produce(client: RawClient, topic_id: uuid.UUID, records: bytes) -> Any:
    return client.call(PRODUCE, 13, {"transactional_id": None, "acks": -1, "timeout_ms": 10000,
                                     "topic_data": [{"topic_id": topic_id,
                                                     "partition_data": [{"index": 0, "records": records}]}]})


def test_produce_v13_and_list_offsets_v10(cluster_factory: Any) -> None:
    cluster = cluster_factory(2)
    cluster.create_topic(TOPIC, 1, 1)
    leader_id = cluster.leader(TOPIC, 0)
    other_id = next(i for i in cluster.brokers if i != leader_id)
    leader, other = cluster.brokers[leader_id], cluster.brokers[other_id]
    to_leader, to_other = RawClient(leader.host, leader.port), RawClient(other.host, other.port)
    try:
        topic_id = _topic_id(to_leader, TOPIC)
        # The other broker learns the topic too (its metadata follows the controller's).
        wait_until(lambda: _topic_id(to_other, TOPIC) == topic_id, 30, "the topic known to both brokers")
        now = int(time.time() * 1000)
        batch = build_batch([(b"k%d" % i, b"v%d" % i, now + i, []) for i in range(3)])

        # Sent to the broker that does not lead the partition: where the leader is.
        moved = _produce(to_other, topic_id, batch)
        (topic,) = moved.responses
        assert topic.topic_id == topic_id and topic.name == ""  # v13 answers by id only
        part = topic.partition_responses[0]
        assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        state = cluster.state(TOPIC, 0)
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader_id, state["leader_epoch"])
        assert [(n.node_id, n.host, n.port) for n in moved.node_endpoints] == [(leader_id, leader.host, leader.port)]

        # To the leader (once it has taken the lead, as a client retries): stored, and
        # no leader hint.
        answers: list[Any] = []
        wait_until(lambda: answers.append(_produce(to_leader, topic_id, batch))
                   or answers[-1].responses[0].partition_responses[0].error_code != ErrorCode.NOT_LEADER_OR_FOLLOWER,
                   30, "the leader taking the lead")
        stored = answers[-1]
        part = stored.responses[0].partition_responses[0]
        assert (part.error_code, part.base_offset) == (ErrorCode.NONE, 0)
        assert part.current_leader is None and not stored.node_endpoints

        # An id no topic has.
        unknown = _produce(to_leader, uuid.uuid4(), batch).responses[0]
        assert unknown.partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID

        def list_offsets(client: RawClient, timestamp: int) -> Any:
            response: Any = client.call(LIST_OFFSETS, 10, {
                "replica_id": -1, "isolation_level": 0, "timeout_ms": 5000,
                "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                                           "timestamp": timestamp}]}]})
            return response.topics[0].partitions[0]

        assert (list_offsets(to_leader, -1).offset, list_offsets(to_leader, -2).offset) == (3, 0)
        by_time = list_offsets(to_leader, now + 1)
        assert (by_time.offset, by_time.timestamp) == (1, now + 1)
        assert (list_offsets(to_leader, -3).offset, list_offsets(to_leader, -3).timestamp) == (2, now + 2)
        assert list_offsets(to_leader, -4).offset == 0  # every segment is local
        tiered = list_offsets(to_leader, -5)  # nothing in tiered storage
        assert (tiered.error_code, tiered.offset, tiered.timestamp) == (ErrorCode.NONE, -1, -1)
        assert list_offsets(to_other, -1).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    finally:
        to_leader.close()
        to_other.close()
