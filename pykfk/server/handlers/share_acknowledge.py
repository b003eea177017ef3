"""ShareAcknowledge (key 79): a share-group member (KIP-932) acknowledges records it
acquired, without fetching. The share session must exist (epoch n continues it, -1
closes it after the acknowledgements and releases what the member still holds; 0 is
INVALID_SHARE_SESSION_EPOCH). READ on the group and on each topic."""

from __future__ import annotations

from pykfk.errors import ErrorCode
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed, topics_denied
from pykfk.server.handlers.metadata import topic_ids
from pykfk.server.share_groups import acknowledge, held_state, persist, share_coordinator

API_KEY = 79
VERSIONS = (1, 1)


def _top(code: int, message: str | None = None) -> typed.ShareAcknowledgeResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "responses": [],
            "node_endpoints": []}


async def handle(ctx: RequestContext, request: typed.ShareAcknowledgeRequest) -> typed.ShareAcknowledgeResponse:
    group_id, member_id = request.group_id, request.member_id
    if not group_id or not member_id:
        return _top(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set.")
    if not group_allowed(ctx, Operation.READ, group_id):
        return _top(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = share_coordinator(ctx)
    session = coordinator.session(group_id, member_id, request.share_session_epoch, acknowledge_only=True)
    if isinstance(session, int):
        return _top(session)
    ids = topic_ids(ctx.broker.metadata)
    denied = topics_denied(ctx, Operation.READ, {n for t in request.topics if (n := ids.name_of(t.topic_id))})
    responses: list[typed.ShareAcknowledgeTopicResponse] = []
    for topic in request.topics:
        name = ids.name_of(topic.topic_id)
        partitions: list[typed.ShareAcknowledgeResponsePartitionData] = []
        for part in topic.partitions:
            code: int
            if name is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID
            elif name in denied:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            else:
                state, code = held_state(ctx, coordinator, group_id, name, part.partition_index)
                if code == ErrorCode.NONE:
                    code = acknowledge(state, member_id, part.acknowledgement_batches)
                if code == ErrorCode.NONE and state is not None:
                    code = await persist(ctx, group_id, topic.topic_id, part.partition_index, state)
            partitions.append({"partition_index": part.partition_index, "error_code": code, "error_message": None,
                               "current_leader": {"leader_id": -1, "leader_epoch": -1}})
        responses.append({"topic_id": topic.topic_id, "partitions": partitions})
    if request.share_session_epoch == -1:
        coordinator.release_member(group_id, member_id)
    return {**_top(ErrorCode.NONE), "responses": responses}
