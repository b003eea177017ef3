"""DeleteTopics (key 20): remove topics from the metadata store and delete their logs."""

from __future__ import annotations

from typing import Any

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol.types import Struct
from pykfk.security.acl import Operation, ResourceType
from pykfk.server.dispatch import RequestContext

API_KEY = 20
VERSIONS = (0, 3)


async def handle(ctx: RequestContext, request: Struct) -> dict[str, Any]:
    responses = []
    for name in dict.fromkeys(request.topic_names):
        try:
            if not ctx.allowed(Operation.DELETE, ResourceType.TOPIC, name):
                raise KafkaError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            await ctx.broker.topics.delete_topic(name)
            code = ErrorCode.NONE
        except KafkaError as exc:
            code = exc.code
        responses.append({"name": name, "error_code": code})
    return {"throttle_time_ms": 0, "responses": responses}
