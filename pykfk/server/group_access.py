"""ACL checks of the group APIs (Kafka's KafkaApis rules), kept out of ``pykfk.group`` so
the coordinator knows nothing of principals: READ on the group to join, sync, heartbeat,
leave and commit; DESCRIBE to find its coordinator, describe it, list it and fetch its
offsets; DELETE to delete it; READ (commit) or DESCRIBE (fetch) on each topic."""

from __future__ import annotations

from collections.abc import Iterable

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext


def group_allowed(ctx: RequestContext, operation: Operation, group: str) -> bool:
    return ctx.allowed(operation, ResourceType.GROUP, group)


def topics_denied(ctx: RequestContext, operation: Operation, names: Iterable[str]) -> set[str]:
    if ctx.broker.authorizer is None:
        return set()
    return {n for n in names if not ctx.allowed(operation, ResourceType.TOPIC, n)}


def commit_denied_body(request: typed.OffsetCommitRequest, code: int,
                       only: set[str] | None = None) -> list[typed.OffsetCommitResponseTopic]:
    """OffsetCommit response topics answering ``code`` for every partition (of ``only``)."""
    return [{"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                            for p in t.partitions]}
            for t in request.topics if only is None or t.name in only]


def fetch_denied_topics(topics: Iterable[typed.OffsetFetchRequestTopic | typed.OffsetFetchRequestTopics],
                        denied: set[str], code: int = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        ) -> list[typed.OffsetFetchResponseTopic]:
    """OffsetFetch response topics (any version's layout) answering ``code`` for those of
    ``topics`` in ``denied``."""
    return [{"name": t.name, "partitions": [
        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": code} for p in t.partition_indexes]}
        for t in topics if t.name in denied]
