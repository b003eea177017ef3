"""OffsetForLeaderEpoch (key 23): where a leader epoch ended on this partition's leader
(KIP-101, KIP-320). A follower that starts following asks it for its latest epoch and
truncates its log there before fetching, so a tail the leader never had is dropped.

The leader answers from its leader epoch cache (``pykfk.cluster.leader_epoch``): the
largest epoch at or below the one asked and the offset where the next epoch started (the
log end offset for the current epoch). A standalone broker leads every partition at
epoch 0 and answers the same way.
"""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.server.services import BrokerServices

API_KEY = 23
VERSIONS = (0, 4)



def _answer(broker: BrokerServices, topic: str, part: typed.OffsetForLeaderEpochRequestOffsetForLeaderPartition
            ) -> typed.OffsetForLeaderEpochResponseEpochEndOffset:
    # current_leader_epoch is in the request from v2; the decoder's default (-1) before.
    epoch, end_offset = broker.replica_manager.end_offset_for_epoch(
        topic, part.partition, part.leader_epoch, part.current_leader_epoch)
    return {"error_code": ErrorCode.NONE, "partition": part.partition, "leader_epoch": epoch, "end_offset": end_offset}


async def handle(ctx: RequestContext, request: typed.OffsetForLeaderEpochRequest) -> typed.OffsetForLeaderEpochResponse:
    topics: list[typed.OffsetForLeaderEpochResponseOffsetForLeaderTopicResult] = []
    follower = ctx.api_version >= 3 and request.replica_id >= 0
    cluster_ok = not follower or ctx.allowed_on_cluster(Operation.CLUSTER_ACTION)
    for topic in request.topics:
        partitions: list[typed.OffsetForLeaderEpochResponseEpochEndOffset] = []
        denied = not cluster_ok or (not follower and not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC,
                                                                    topic.topic))
        for part in topic.partitions:
            try:
                if denied:
                    raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                partitions.append(_answer(ctx.broker, topic.topic, part))
            except KafkaError as exc:
                partitions.append({"error_code": exc.code, "partition": part.partition, "leader_epoch": -1, "end_offset": -1})
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time_ms": 0, "topics": topics}
