"""CreateTopics (key 19): Kafka's checks (name, duplicates, partitions, replication
factor, assignments, configs), ``validate_only``, and creation through the metadata store.

v4 allows -1 for num_partitions / replication_factor, meaning the broker defaults
(``num.partitions``, ``default.replication.factor``). From v5 a created (or validated)
topic is answered with its partition count, replication factor and settings as
DescribeConfigs would report them; from v7 with its topic id.
"""

from __future__ import annotations

from pykfk.cluster.metadata import TopicInfo
from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.server.handlers.describe_configs import topic_configs
from pykfk.server.handlers.metadata import topic_uuid
from pykfk.server.services import BrokerServices

API_KEY = 19
VERSIONS = (0, 7)


def _from_assignments(broker: BrokerServices, topic: typed.CreateTopicsRequestCreatableTopic) -> tuple[int, int]:
    """Partition count and replication factor implied by explicit replica assignments."""
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.",
        )
    indexes = sorted(a.partition_index for a in topic.assignments)
    if indexes != list(range(len(indexes))):
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "Partitions must be numbered 0..n-1 without gaps.")
    known = {b.node_id for b in broker.metadata.brokers()}
    factors = set()
    for a in topic.assignments:
        if len(set(a.broker_ids)) != len(a.broker_ids) or not a.broker_ids:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Invalid replicas for partition {a.partition_index}.")
        if not set(a.broker_ids) <= known:
            raise KafkaError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"Unknown broker ids in the assignment of partition {a.partition_index}: {sorted(set(a.broker_ids) - known)}.",
            )
        factors.add(len(a.broker_ids))
    if len(factors) != 1:
        raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "All partitions must have the same number of replicas.")
    return len(indexes), factors.pop()


async def handle(ctx: RequestContext, request: typed.CreateTopicsRequest) -> typed.CreateTopicsResponse:
    broker = ctx.broker
    validate_only = bool(request.validate_only)
    counts: dict[str, int] = {}
    for topic in request.topics:
        counts[topic.name] = counts.get(topic.name, 0) + 1
    results: list[typed.CreateTopicsResponseCreatableTopicResult] = []
    for topic in request.topics:
        name = topic.name
        try:
            if counts[name] > 1:
                raise KafkaError(ErrorCode.INVALID_REQUEST, f"Create topics request contains topic {name} more than once.")
            if not (ctx.allowed_on_cluster(Operation.CREATE) or ctx.allowed(Operation.CREATE, ResourceType.TOPIC, name)):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            partitions, replication = topic.num_partitions, topic.replication_factor
            if topic.assignments:
                partitions, replication = _from_assignments(broker, topic)
            given = {c.name: c.value for c in topic.configs}
            partitions, replication, configs = broker.topics.check_new_topic(name, partitions, replication, given)
            info = TopicInfo(name, partitions, replication, configs)
            if not validate_only:
                assignment = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments} or None
                info = await broker.topics.create_topic(name, partitions, replication, configs, assignment=assignment)
            results.append(_created(ctx, info))
        except KafkaError as exc:
            results.append({"name": name, "error_code": exc.code, "error_message": exc.message})
    return {"throttle_time_ms": 0, "topics": results}


def _created(ctx: RequestContext, info: TopicInfo) -> typed.CreateTopicsResponseCreatableTopicResult:
    result: typed.CreateTopicsResponseCreatableTopicResult = {"name": info.name, "error_code": ErrorCode.NONE, "error_message": None}
    if ctx.api_version >= 5:
        configs: list[typed.CreateTopicsResponseCreatableTopicConfigs] = [{"name": c["name"], "value": c["value"], "read_only": c["read_only"],
                    "config_source": c["config_source"], "is_sensitive": c["is_sensitive"]}
                   for c in topic_configs(ctx.broker.config, info, None)]
        result.update({"num_partitions": info.partitions, "replication_factor": info.replication_factor,
                       "configs": configs, "topic_id": topic_uuid(info)})
    return result
