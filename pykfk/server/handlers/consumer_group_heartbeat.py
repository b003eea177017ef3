"""ConsumerGroupHeartbeat (key 68): members of consumer-protocol groups (KIP-848) join,
heartbeat and leave; the coordinator answers with their epoch and assignment.

The group coordinator (``pykfk.group.consumer_group``) does the work; this module gives it
the cluster's topics (``TopicCatalog``), which its assignors and regular expressions use.

READ on the group (else GROUP_AUTHORIZATION_FAILED); a subscription naming a topic the
member may not DESCRIBE is refused with TOPIC_AUTHORIZATION_FAILED, as Kafka's KafkaApis
does (a member must not learn of topics it may not see). A regular expression matches only
the topics the member that set it may describe.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from pykfk.cluster.metadata import ClusterView
from pykfk.cluster.topics import is_internal_topic
from pykfk.errors import ErrorCode
from pykfk.group import api
from pykfk.protocol.typed import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed, topics_denied
from pykfk.server.handlers.metadata import store_cache, topic_uuid

API_KEY = 68
VERSIONS = (0, 1)


class StoreCatalog:
    """The store's topics by name as (topic id, partition count), internal topics left
    out; rebuilt once after a topic came, went or grew (``version`` counts those)."""

    def __init__(self, store: ClusterView):
        self.store = store
        self.version = 0
        self._topics: dict[str, tuple[uuid.UUID, int]] | None = None
        store.add_listener(self._changed)

    def _changed(self, kind: str, _key: object) -> None:
        if kind in ("topic", "delete_topic"):
            self.version += 1
            self._topics = None

    def topics(self) -> Mapping[str, tuple[uuid.UUID, int]]:
        if self._topics is None:
            self._topics = {name: (topic_uuid(info), info.partitions) for name, info in self.store.topics().items()
                            if not is_internal_topic(name)}
        return self._topics

    def names_by_id(self) -> dict[uuid.UUID, str]:
        return {topic_id: name for name, (topic_id, _) in self.topics().items()}


def catalog(store: ClusterView) -> StoreCatalog:
    return store_cache(StoreCatalog, store)


async def handle(ctx: RequestContext, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    if not group_allowed(ctx, Operation.READ, request.group_id):
        return {"throttle_time_ms": 0, "error_code": ErrorCode.GROUP_AUTHORIZATION_FAILED,
                "member_epoch": 0, "heartbeat_interval_ms": 0}
    may_describe = None
    if ctx.broker.authorizer is not None:
        denied = sorted(topics_denied(ctx, Operation.DESCRIBE, request.subscribed_topic_names or ()))
        if denied:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    "error_message": f"Not authorized to describe topics {denied}.",
                    "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0}
        if request.subscribed_topic_regex:
            may_describe = _describer(ctx)
    return await api.consumer_group_heartbeat(
        ctx.broker.group_coordinator, ctx.api_version, request, catalog=catalog(ctx.broker.metadata),
        client_id=ctx.client_id, client_host=ctx.client_host, may_describe=may_describe)


def _describer(ctx: RequestContext) -> Callable[[str], bool]:
    """Whether the member's principal may describe a topic, without holding on to the
    request (a regular expression is resolved later, after the answer went out)."""
    authorizer, principal, address = ctx.broker.authorizer, ctx.session.principal, ctx.session.client_ip
    assert authorizer is not None

    def may_describe(topic: str) -> bool:
        return authorizer.authorize(principal, address, Operation.DESCRIBE, ResourceType.TOPIC, topic)

    return may_describe
