"""DeleteTopics (key 20): remove topics from the metadata store and delete their logs.

v6 may name a topic by id alone (UNKNOWN_TOPIC_ID when no topic has it); v5+ answers
carry an error message.
"""

from __future__ import annotations

import uuid

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import typed
from pykfk.protocol.types import ZERO_UUID
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext
from pykfk.server.handlers.metadata import topic_ids, topic_uuid

API_KEY = 20
VERSIONS = (0, 6)


def _named(ctx: RequestContext, request: typed.DeleteTopicsRequest) -> list[tuple[str | None, uuid.UUID]]:
    """(name, id) of each topic to delete; a name of None for an id no topic has."""
    if ctx.api_version < 6:
        return [(name, ZERO_UUID) for name in request.topic_names]
    topics = ctx.broker.metadata.topics()
    ids = topic_ids(ctx.broker.metadata)
    named: list[tuple[str | None, uuid.UUID]] = []
    for topic in request.topics:
        if topic.name is not None:
            info = topics.get(topic.name)
            named.append((topic.name, topic_uuid(info) if info is not None else ZERO_UUID))
        else:
            named.append((ids.name_of(topic.topic_id), topic.topic_id))
    return named


async def handle(ctx: RequestContext, request: typed.DeleteTopicsRequest) -> typed.DeleteTopicsResponse:
    responses: list[typed.DeleteTopicsResponseDeletableTopicResult] = []
    for name, topic_id in dict.fromkeys(_named(ctx, request)):
        code, message = ErrorCode.NONE, None
        try:
            if name is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}")
            if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            await ctx.broker.topics.delete_topic(name)
        except KafkaError as exc:
            code, message = exc.code, exc.message
        responses.append({"name": name, "topic_id": topic_id, "error_code": code, "error_message": message})
    return {"throttle_time_ms": 0, "responses": responses}
