"""DescribeTopicPartitions (key 75, KIP-966): the requested topics (every topic the
principal may describe when none is named), in name order, with their partitions a page
at a time: at most ``response_partition_limit`` partitions (capped at 2,000, Kafka's
``max.request.partition.size.limit`` default) per answer, continued from the request's
cursor; ``next_cursor`` says where the next page starts. Partition entries are
Metadata's (leader, epoch, replicas, ISR, offline replicas); there are no eligible
leader replicas (KIP-966's ELR is a KRaft feature).
"""

from __future__ import annotations

from typing import cast

from pykfk.cluster.topics import is_internal_topic
from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.protocol.types import ZERO_UUID
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.server.handlers.metadata import partition_entry, topic_operations, topic_uuid

API_KEY = 75
VERSIONS = (0, 0)
PARTITION_LIMIT = 2000


def _names(ctx: RequestContext, request: typed.DescribeTopicPartitionsRequest) -> list[str]:
    if request.topics:
        return sorted({t.name for t in request.topics})
    return [n for n in sorted(ctx.broker.metadata.topics())
            if ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, n)]


def _missing(name: str, code: int) -> typed.DescribeTopicPartitionsResponseTopic:
    return {"error_code": code, "name": name, "topic_id": ZERO_UUID, "is_internal": False, "partitions": []}


def handle(ctx: RequestContext, request: typed.DescribeTopicPartitionsRequest
           ) -> typed.DescribeTopicPartitionsResponse:
    store = ctx.broker.metadata
    names = _names(ctx, request)
    cursor = request.cursor
    if cursor is not None and (cursor.topic_name not in names or cursor.partition_index < 0):
        return {"throttle_time_ms": 0, "topics": [_missing(cursor.topic_name, ErrorCode.INVALID_REQUEST)],
                "next_cursor": None}
    budget = max(1, min(request.response_partition_limit, PARTITION_LIMIT))
    live = {b.node_id for b in store.brokers()}
    topics: list[typed.DescribeTopicPartitionsResponseTopic] = []
    next_cursor: typed.DescribeTopicPartitionsResponseCursor | None = None
    for name in names:
        first = 0
        if cursor is not None:
            if name < cursor.topic_name:
                continue
            if name == cursor.topic_name:
                first = cursor.partition_index
        if budget == 0:
            next_cursor = {"topic_name": name, "partition_index": first}
            break
        if not ctx.allowed(Operation.DESCRIBE, ResourceType.TOPIC, name):
            topics.append(_missing(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            continue
        info = store.get_topic(name)
        if info is None:
            topics.append(_missing(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            continue
        last = min(info.partitions, first + budget)
        budget -= last - first
        topics.append({"error_code": ErrorCode.NONE, "name": name, "topic_id": topic_uuid(info),
                       "is_internal": is_internal_topic(name),
                       "partitions": [cast(typed.DescribeTopicPartitionsResponsePartition,  # Metadata's fields
                                           partition_entry(store, info, p, ctx.broker.broker_id, live))
                                      for p in range(first, last)],
                       "topic_authorized_operations": topic_operations(ctx, name)})
        if last < info.partitions:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
    return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}
