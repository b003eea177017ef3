"""Group APIs from decoded request to response body: the glue the server's handlers call.

Each function takes the ``GroupCoordinator``, the request's ``api_version`` and the decoded
request (typed by ``pykfk.protocol.typed``: the codec fills the fields a version lacks with
their declared defaults), and returns the whole response body, typed the same way, for
every version the protocol tables declare. Version differences live here, so a handler
is one line, e.g. ``return await api.join_group(coordinator, ctx.api_version, request,
client_id=ctx.client_id, client_host=ctx.client_host)``.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict, TypeVar, cast

from pykfk.errors import ErrorCode
from pykfk.group.consumer_group import PROTOCOL_TYPE, Heartbeat, TopicCatalog
from pykfk.group.coordinator import AUTHORIZED_OPERATIONS_OMITTED, GroupCoordinator
from pykfk.protocol import typed

E = ErrorCode
log = logging.getLogger("pykfk.group")

# DescribeGroups authorized_operations with no authorizer: every group operation Kafka
# defines is allowed (AclOperation READ=3, DELETE=6, DESCRIBE=8), as a bit set.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)

# FindCoordinator key_type values (CoordinatorType).
KEY_TYPE_GROUP = 0


Body = TypeVar("Body", bound=Mapping[str, object])


def _body(kind: type[Body], result: Mapping[str, Any]) -> Body:
    """The coordinator's result (a dict of the response's fields) as the ``kind`` response,
    with no throttle."""
    return cast(Body, {"throttle_time_ms": 0, **result})


# -- FindCoordinator ----------------------------------------------------------------------


class Location(TypedDict):
    """The coordinator fields of a FindCoordinator answer (v0-3 at the top, v4 per key)."""

    error_code: int
    error_message: str | None
    node_id: int
    host: str
    port: int


async def find_coordinator(
    coordinator: GroupCoordinator,
    api_version: int,
    request: typed.FindCoordinatorRequest,
    *,
    node_for_partition: Callable[[int], tuple[int, str, int] | None],
) -> typed.FindCoordinatorResponse:
    """FindCoordinator (key 10). ``node_for_partition(p)`` gives (node_id, host, port) of
    the leader of ``__consumer_offsets`` partition p, or None when it has none. Only group
    coordinators exist (transactions are not supported: COORDINATOR_NOT_AVAILABLE).
    Versions 0-3 name one key; v4 batches keys in coordinator_keys."""
    key_type = request.key_type
    if api_version < 4:
        return located(_locate(coordinator, request.key, key_type, node_for_partition))
    return {"throttle_time_ms": 0,
            "coordinators": [{"key": key, **_locate(coordinator, key, key_type, node_for_partition)}
                             for key in request.coordinator_keys]}


def located(found: Location) -> typed.FindCoordinatorResponse:
    """A v0-3 answer: the one key's coordinator at the top of the response."""
    return {"throttle_time_ms": 0, "error_code": found["error_code"], "error_message": found["error_message"],
            "node_id": found["node_id"], "host": found["host"], "port": found["port"]}


def _locate(coordinator: GroupCoordinator, key: str, key_type: int,
            node_for_partition: Callable[[int], tuple[int, str, int] | None]) -> Location:
    if key_type != KEY_TYPE_GROUP:
        return {"error_code": E.COORDINATOR_NOT_AVAILABLE,
                "error_message": "this broker has no transaction coordinator",
                "node_id": -1, "host": "", "port": -1}
    node = node_for_partition(coordinator.partition_for(key))
    if node is None:
        return {"error_code": E.COORDINATOR_NOT_AVAILABLE,
                "error_message": "the group's offsets partition has no leader",
                "node_id": -1, "host": "", "port": -1}
    node_id, host, port = node
    return {"error_code": E.NONE, "error_message": None,
            "node_id": node_id, "host": host, "port": port}


# -- membership ------------------------------------------------------------------------------


async def join_group(
    coordinator: GroupCoordinator,
    api_version: int,
    request: typed.JoinGroupRequest,
    *,
    client_id: str | None,
    client_host: str,
) -> typed.JoinGroupResponse:
    """JoinGroup (key 11). ``client_host`` is the peer address as Kafka shows it
    ("/127.0.0.1"). From v4 an unknown member first gets MEMBER_ID_REQUIRED, as in Kafka;
    v8+ bring the member's reason (logged, as Kafka does); from v9 a rejoining static
    leader of a Stable group gets the members and skip_assignment (KIP-814)."""
    if request.reason:
        log.info("group %r: member %r (client %r) joins: %s", request.group_id, request.member_id or "(new)",
                 client_id, request.reason)
    result = await coordinator.join_group(
        request.group_id,
        request.member_id,
        request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        group_instance_id=request.group_instance_id,
        client_id=client_id or "",
        client_host=client_host,
        require_known_member_id=api_version >= 4,
        skip_assignment_supported=api_version >= 9,
    )
    if result["protocol_name"] is None:
        result["protocol_name"] = ""  # not nullable before v7
    return _body(typed.JoinGroupResponse, result)


async def sync_group(
    coordinator: GroupCoordinator, api_version: int, request: typed.SyncGroupRequest
) -> typed.SyncGroupResponse:
    """SyncGroup (key 14)."""
    return _body(typed.SyncGroupResponse, await coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        [(a.member_id, a.assignment) for a in request.assignments],
        group_instance_id=request.group_instance_id,
        protocol_type=request.protocol_type,
        protocol_name=request.protocol_name,
    ))


async def heartbeat(
    coordinator: GroupCoordinator, api_version: int, request: typed.HeartbeatRequest
) -> typed.HeartbeatResponse:
    """Heartbeat (key 12)."""
    return _body(typed.HeartbeatResponse, await coordinator.heartbeat(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id))


async def leave_group(
    coordinator: GroupCoordinator, api_version: int, request: typed.LeaveGroupRequest
) -> typed.LeaveGroupResponse:
    """LeaveGroup (key 13): v0-v2 name one member; v3+ a batch with per-member errors;
    v5+ each member's reason (logged, as Kafka does)."""
    if api_version < 3:
        result = await coordinator.leave_group(request.group_id, [(request.member_id, None)])
        error = result["error_code"]
        if error == E.NONE and result["members"]:
            error = result["members"][0]["error_code"]
        return {"throttle_time_ms": 0, "error_code": error, "members": []}
    for m in request.members:
        if m.reason:
            log.info("group %r: member %r leaves: %s", request.group_id, m.member_id or m.group_instance_id,
                     m.reason)
    members = [(m.member_id, m.group_instance_id) for m in request.members]
    return _body(typed.LeaveGroupResponse, await coordinator.leave_group(request.group_id, members))


# -- offsets -----------------------------------------------------------------------------------


async def offset_commit(
    coordinator: GroupCoordinator, api_version: int, request: typed.OffsetCommitRequest
) -> typed.OffsetCommitResponse:
    """OffsetCommit (key 8). v0 commits without a group generation (simple commit)."""
    topics = [
        (t.name, [(p.partition_index, p.committed_offset, p.committed_leader_epoch, p.committed_metadata)
                  for p in t.partitions])
        for t in request.topics
    ]
    if coordinator.consumer_groups.get(request.group_id) is not None:
        return _body(typed.OffsetCommitResponse,
                     await _consumer_group_commit(coordinator, api_version, request, topics))
    return _body(typed.OffsetCommitResponse, await coordinator.offset_commit(
        request.group_id,
        request.generation_id_or_member_epoch,  # -1 in v0, which has none
        request.member_id,
        topics,
        group_instance_id=request.group_instance_id,
        retention_time_ms=request.retention_time_ms,  # -1 outside v2-4
    ))


async def txn_offset_commit(
    coordinator: GroupCoordinator, api_version: int, request: typed.TxnOffsetCommitRequest
) -> typed.TxnOffsetCommitResponse:
    """TxnOffsetCommit (key 28): offsets committed inside a producer's transaction.
    PRODUCER_FENCED reaches versions below 2 as INVALID_PRODUCER_EPOCH (KIP-588)."""
    topics = [
        (t.name, [(p.partition_index, p.committed_offset, p.committed_leader_epoch,
                   p.committed_metadata) for p in t.partitions])
        for t in request.topics
    ]
    result = await coordinator.txn_offset_commit(
        request.group_id, request.producer_id, request.producer_epoch, topics,
        generation_id=request.generation_id, member_id=request.member_id,
        group_instance_id=request.group_instance_id)
    if api_version < 2:
        for topic in result["topics"]:
            for partition in topic["partitions"]:
                if partition["error_code"] == E.PRODUCER_FENCED:
                    partition["error_code"] = E.INVALID_PRODUCER_EPOCH
    return _body(typed.TxnOffsetCommitResponse, result)


async def _consumer_group_commit(coordinator: GroupCoordinator, api_version: int,
                                 request: typed.OffsetCommitRequest,
                                 topics: list[tuple[str, list[tuple[int, int, int, str | None]]]]
                                 ) -> Mapping[str, object]:
    """A commit to a consumer-protocol group: its member and member epoch are checked
    there, then the offsets are stored like a commit from outside any generation."""
    error = coordinator.consumer_groups.commit_error(
        request.group_id, request.member_id, request.generation_id_or_member_epoch, api_version)
    if error is not None:
        return {"topics": [{"name": name, "partitions": [{"partition_index": p[0], "error_code": error}
                                                         for p in partitions]} for name, partitions in topics]}
    return await coordinator.offset_commit(request.group_id, -1, "", topics)


async def offset_fetch(
    coordinator: GroupCoordinator, api_version: int, request: typed.OffsetFetchRequest
) -> typed.OffsetFetchResponse:
    """OffsetFetch (key 9). A null topic list (v2+) asks for every committed partition;
    v2+ report a group-level error at the top, v0-v1 per partition; v8+ name several
    groups, each answered on its own (``offset_fetch_groups``)."""
    if api_version >= 8:
        return {"throttle_time_ms": 0,
                "groups": await offset_fetch_groups(coordinator, request, lambda g: _topic_list(g.topics))}
    result = await offset_fetch_group(coordinator, request.group_id, _topic_list(request.topics),
                                      require_stable=request.require_stable)
    if api_version >= 2 and result["error_code"] != E.NONE:
        result["topics"] = []
    return _body(typed.OffsetFetchResponse, result)


def _topic_list(topics: Sequence[typed.OffsetFetchRequestTopic] | Sequence[typed.OffsetFetchRequestTopics] | None
                ) -> list[tuple[str, list[int]]] | None:
    return None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]


async def offset_fetch_group(
    coordinator: GroupCoordinator, group_id: str, topics: list[tuple[str, list[int]]] | None, *,
    require_stable: bool, member_id: str | None = None, member_epoch: int = -1,
) -> dict[str, Any]:
    """One group's committed offsets: {error_code, topics}. A member of a consumer-protocol
    group names itself (OffsetFetch v9+: ``member_id``, ``member_epoch``) and is checked
    as Kafka does (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, as the group's error); a request
    without them (an admin client) is always answered."""
    error = coordinator.consumer_groups.fetch_error(group_id, member_id, member_epoch)
    if error is not None:
        return {"error_code": error, "topics": []}
    return await coordinator.offset_fetch(group_id, topics, require_stable=require_stable)


async def offset_fetch_groups(
    coordinator: GroupCoordinator, request: typed.OffsetFetchRequest,
    topics_of: Callable[[typed.OffsetFetchRequestGroup], list[tuple[str, list[int]]] | None],
) -> list[typed.OffsetFetchResponseGroup]:
    """OffsetFetch v8+: each group of the request answered on its own (its own error).
    ``topics_of`` gives the topics to read for a group (the caller leaves out those it
    answers itself)."""
    out: list[typed.OffsetFetchResponseGroup] = []
    for group in request.groups:
        result = await offset_fetch_group(coordinator, group.group_id, topics_of(group),
                                          require_stable=request.require_stable,
                                          member_id=group.member_id, member_epoch=group.member_epoch)
        out.append({"group_id": group.group_id, "error_code": result["error_code"],
                    "topics": result["topics"] if result["error_code"] == E.NONE else []})
    return out


# -- administration ------------------------------------------------------------------------------


async def list_groups(
    coordinator: GroupCoordinator, api_version: int, request: typed.ListGroupsRequest
) -> typed.ListGroupsResponse:
    """ListGroups (key 16); v4+ may filter by state, v5+ by type ("classic", "consumer").
    A consumer-protocol group is listed once, as such, with protocol type "consumer"."""
    states = {s.lower() for s in request.states_filter}
    types = {t.lower() for t in request.types_filter}
    result = await coordinator.list_groups(request.states_filter)
    consumer = coordinator.consumer_groups.groups() if result["error_code"] != E.COORDINATOR_NOT_AVAILABLE else []
    consumer_ids = {g.group_id for g in consumer}
    listed = [g for g in result["groups"] if g["group_id"] not in consumer_ids]
    listed += [{"group_id": g.group_id, "protocol_type": PROTOCOL_TYPE, "group_state": g.state.value,
                "group_type": "consumer"} for g in consumer if not states or g.state.value.lower() in states]
    result["groups"] = [g for g in listed if not types or g["group_type"] in types]
    return _body(typed.ListGroupsResponse, result)


async def describe_groups(
    coordinator: GroupCoordinator, api_version: int, request: typed.DescribeGroupsRequest
) -> typed.DescribeGroupsResponse:
    """DescribeGroups (key 15); v6+ answers GROUP_ID_NOT_FOUND for unknown groups."""
    result = await coordinator.describe_groups(request.groups, unknown_as_error=api_version >= 6)
    for entry in result["groups"]:
        if coordinator.consumer_groups.get(entry["group_id"]) is not None:
            # Kafka's answer for a consumer-protocol group: it is not a classic group.
            entry.update(not_classic(entry["group_id"], api_version))
    if request.include_authorized_operations:
        for group in result["groups"]:
            if group["error_code"] == E.NONE:
                group["authorized_operations"] = GROUP_AUTHORIZED_OPERATIONS
    return _body(typed.DescribeGroupsResponse, result)


async def delete_groups(
    coordinator: GroupCoordinator, api_version: int, request: typed.DeleteGroupsRequest
) -> typed.DeleteGroupsResponse:
    """DeleteGroups (key 42)."""
    return _body(typed.DeleteGroupsResponse, await coordinator.delete_groups(request.groups_names))


def not_classic(group_id: str, api_version: int) -> typed.DescribeGroupsResponseDescribedGroup:
    """Kafka's DescribeGroups entry of a group of another protocol (consumer, share)."""
    found = api_version < 6
    return {"group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
            "error_code": E.NONE if found else E.GROUP_ID_NOT_FOUND,
            "error_message": None if found else f"Group {group_id} is not a classic group."}


# -- consumer-protocol groups (KIP-848) ------------------------------------------------------------


async def consumer_group_heartbeat(
    coordinator: GroupCoordinator, api_version: int, request: typed.ConsumerGroupHeartbeatRequest, *,
    catalog: TopicCatalog, client_id: str | None, client_host: str,
    may_describe: Callable[[str], bool] | None = None,
) -> typed.ConsumerGroupHeartbeatResponse:
    """ConsumerGroupHeartbeat (key 68). v0 members get their id from the coordinator;
    from v1 they bring their own. ``may_describe`` (with an authorizer) bounds what the
    member's regular expression may match."""
    owned = None if request.topic_partitions is None else {
        tp.topic_id: frozenset(tp.partitions) for tp in request.topic_partitions}
    heartbeat = Heartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex,
        server_assignor=request.server_assignor, owned=owned, client_id=client_id or "",
        client_host=client_host, client_generates_id=api_version >= 1, may_describe=may_describe)
    return _body(typed.ConsumerGroupHeartbeatResponse, await coordinator.consumer_groups.heartbeat(heartbeat, catalog))


async def consumer_group_describe(
    coordinator: GroupCoordinator, api_version: int, request: typed.ConsumerGroupDescribeRequest, *,
    topic_names: Mapping[uuid.UUID, str],
) -> typed.ConsumerGroupDescribeResponse:
    """ConsumerGroupDescribe (key 69)."""
    groups = [coordinator.consumer_groups.describe(group_id, topic_names) for group_id in request.group_ids]
    if request.include_authorized_operations:
        for group in groups:
            if group["error_code"] == E.NONE:
                group["authorized_operations"] = GROUP_AUTHORIZED_OPERATIONS
    return _body(typed.ConsumerGroupDescribeResponse, {"groups": groups})
