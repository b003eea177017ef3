"""CreatePartitions (key 37): grow a topic's partition count (never shrink)."""

from __future__ import annotations

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 37
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: typed.CreatePartitionsRequest) -> typed.CreatePartitionsResponse:
    broker = ctx.broker
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    results: list[typed.CreatePartitionsTopicResult] = []
    for topic in request.topics:
        try:
            if counts[topic.name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Duplicate topic in request: {topic.name}")
            if not ctx.allowed(Operation.ALTER, ResourceType.TOPIC, topic.name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if topic.assignments is not None:
                known = {b.node_id for b in broker.metadata.brokers()}
                for a in topic.assignments:
                    if not a.broker_ids or not set(a.broker_ids) <= known:
                        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid replica assignment {a.broker_ids}")
                current = broker.metadata.get_topic(topic.name)
                if current is not None and len(topic.assignments) != topic.count - current.partitions:
                    raise KafkaError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"Increasing the number of partitions by {topic.count - current.partitions} but "
                        f"{len(topic.assignments)} assignments provided.",
                    )
            await broker.topics.create_partitions(topic.name, topic.count, validate_only=request.validate_only)
            code, message = ErrorCode.NONE, None
        except KafkaError as exc:
            code, message = exc.code, exc.message
        results.append({"name": topic.name, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "results": results}
