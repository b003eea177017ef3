"""ACL checks of the group APIs (Kafka's KafkaApis rules), kept out of ``pykfk.group`` so
the coordinator knows nothing of principals: READ on the group to join, sync, heartbeat,
leave and commit; DESCRIBE to find its coordinator, describe it, list it and fetch its
offsets; DELETE to delete it; READ (commit) or DESCRIBE (fetch) on each topic."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode
from pykfk.protocol.types import Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

GROUP_DENIED = {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED}


def group_allowed(ctx: RequestContext, operation: Operation, group: str) -> bool:
    return ctx.allowed(operation, ResourceType.GROUP, group)


def topics_denied(ctx: RequestContext, operation: Operation, names: Any) -> set[str]:
    if ctx.broker.authorizer is None:
        return set()
    return {n for n in names if not ctx.allowed(operation, ResourceType.TOPIC, n)}


def without_topics(request: Struct, denied: set[str]) -> Struct:
    """The request with the denied topics left out."""
    copy = Struct(request)
    copy["topics"] = [t for t in request.topics if t.name not in denied]
    return copy


def commit_denied_body(request: Struct, code: int, only: set[str] | None = None) -> list[dict[str, Any]]:
    """OffsetCommit response topics answering ``code`` for every partition (of ``only``)."""
    return [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]}
            for t in request.topics if only is None or t.name in only]


def fetch_denied_topics(request: Struct, denied: set[str]) -> list[dict[str, Any]]:
    """OffsetFetch response topics answering TOPIC_AUTHORIZATION_FAILED for ``denied``."""
    return [{"name": t.name, "partitions": [
        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED} for p in t.partition_indexes]}
        for t in request.topics if t.name in denied]
