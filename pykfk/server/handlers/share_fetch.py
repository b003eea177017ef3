"""ShareFetch (key 78): a share-group member (KIP-932) acknowledges what it acquired
before and acquires more: the answer carries, per partition, the whole record batches
holding its acquired records and their offset ranges with delivery counts
(``pykfk.server.share_groups``, ``pykfk.group.share``).

Share sessions: epoch 0 opens one for the member (no acknowledgements allowed: INVALID_REQUEST),
n continues it (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH), -1 acknowledges,
releases what the member still holds and closes it. READ on the group
(GROUP_AUTHORIZATION_FAILED) and on each topic (TOPIC_AUTHORIZATION_FAILED). When nothing
can be acquired the request waits for an append or an acquisition lock to expire, up to
``max_wait_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from pykfk.errors import ErrorCode, KafkaError
from pykfk.group.share.coordinator import ShareCoordinator
from pykfk.protocol import typed
from pykfk.security.acl import Operation
from pykfk.security.quotas import CONSUMER_BYTE_RATE
from pykfk.server.dispatch import RequestContext
from pykfk.server.group_access import group_allowed, topics_denied
from pykfk.server.handlers.metadata import topic_ids
from pykfk.server.share_groups import (
    acknowledge,
    held_state,
    load_group_configs,
    load_partition,
    now_ms,
    persist,
    read_and_acquire,
    share_coordinator,
)

API_KEY = 78
VERSIONS = (1, 1)

INT32_MAX = 2**31 - 1


def _top(code: int, message: str | None = None, lock_ms: int = 0) -> typed.ShareFetchResponse:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "acquisition_lock_timeout_ms": lock_ms, "responses": [], "node_endpoints": []}


def _partition(index: int, code: int = ErrorCode.NONE, leader: int = -1, epoch: int = -1
               ) -> typed.ShareFetchResponsePartitionData:
    return {"partition_index": index, "error_code": code, "error_message": None,
            "acknowledge_error_code": ErrorCode.NONE, "acknowledge_error_message": None,
            "current_leader": {"leader_id": leader, "leader_epoch": epoch}, "records": b"",
            "acquired_records": []}


async def handle(ctx: RequestContext, request: typed.ShareFetchRequest) -> typed.ShareFetchResponse:
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not group_id or not member_id:
        return _top(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set.")
    if not group_allowed(ctx, Operation.READ, group_id):
        return _top(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = share_coordinator(ctx)
    lock_ms = coordinator.lock_duration_ms(group_id)
    acks = [(t.topic_id, p.partition_index, p.acknowledgement_batches)
            for t in request.topics for p in t.partitions if p.acknowledgement_batches]
    if epoch == 0 and acks:
        return _top(ErrorCode.INVALID_REQUEST, "Acknowledgements are not allowed in the initial request.", lock_ms)
    ids = topic_ids(ctx.broker.metadata)
    wanted = {(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions}
    forgotten = {(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions}
    named = {(name, p) for i, p in wanted if (name := ids.name_of(i)) is not None}
    session = coordinator.session(group_id, member_id, epoch, named,
                                  {(name, p) for i, p in forgotten if (name := ids.name_of(i)) is not None})
    if isinstance(session, int):
        return _top(session, lock_ms=lock_ms)
    denied = topics_denied(ctx, Operation.READ, {name for name, _p in session.partitions | named})
    answers: dict[tuple[uuid.UUID, int], typed.ShareFetchResponsePartitionData] = {
        (i, p): _partition(p, ErrorCode.UNKNOWN_TOPIC_ID) for i, p in wanted if ids.name_of(i) is None}
    await load_group_configs(ctx)
    for topic_id, index, batches in acks:
        answer = answers.setdefault((topic_id, index), _partition(index))
        name = ids.name_of(topic_id)
        if name is None or name in denied:
            answer["error_code"] = ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            continue
        part, code = held_state(ctx, coordinator, group_id, name, index)
        if code == ErrorCode.NONE:
            code = acknowledge(part, member_id, batches)
        if code == ErrorCode.NONE and part is not None:
            code = await persist(ctx, group_id, topic_id, index, part)
        answer["acknowledge_error_code"] = code
    if epoch == -1:
        coordinator.release_member(group_id, member_id)
    else:
        await _fetch(ctx, request, coordinator, session.partitions, denied, answers)
    throttle_ms = 0
    if ctx.broker.quotas.active:  # consumer byte-rate quotas apply as to Fetch
        sent = sum(len(r) for a in answers.values() if isinstance(r := a["records"], bytes))
        throttle_ms = ctx.charge(CONSUMER_BYTE_RATE, sent)
    by_topic: dict[uuid.UUID, list[typed.ShareFetchResponsePartitionData]] = {}
    for (topic_id, _index), answer in sorted(answers.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        by_topic.setdefault(topic_id, []).append(answer)
    return {**_top(ErrorCode.NONE, lock_ms=lock_ms), "throttle_time_ms": throttle_ms,
            "responses": [{"topic_id": t, "partitions": parts} for t, parts in by_topic.items()]}


async def _fetch(ctx: RequestContext, request: typed.ShareFetchRequest, coordinator: ShareCoordinator,
                 partitions: set[tuple[str, int]], denied: set[str],
                 answers: dict[tuple[uuid.UUID, int], typed.ShareFetchResponsePartitionData]) -> None:
    """Acquire from the session's partitions, waiting (bounded by ``max_wait_ms``) while
    nothing can be acquired."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    keys = sorted(partitions)
    group_id = request.group_id or ""
    settled: dict[tuple[str, int], tuple[int, int]] = {}  # what a read archived or moved on
    ids = topic_ids(ctx.broker.metadata)
    for name, index in keys:  # a leadership begun here starts from the share coordinator's state
        if name not in denied:
            with contextlib.suppress(KafkaError):
                leader = ctx.broker.replica_manager.leader_partition(name, index)
                await load_partition(ctx, coordinator, group_id, name, ids.id_of(name), index, leader,
                                     recheck=request.share_session_epoch == 0)
    for _attempt in range(10_000):
        if _read_pass(ctx, request, coordinator, keys, denied, answers, settled) or ctx.broker.stopping:
            break
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        next_lock = coordinator.next_lock_deadline_ms((group_id, t, p) for t, p in keys)
        if next_lock is not None:
            remaining = min(remaining, max(next_lock - now_ms(ctx), 1) / 1000)
        await ctx.broker.replica_manager.fetch_waiters(-1).wait(keys, remaining)
    await _store_settled(ctx, coordinator, group_id, settled)


async def _store_settled(ctx: RequestContext, coordinator: ShareCoordinator, group_id: str,
                         settled: dict[tuple[str, int], tuple[int, int]]) -> None:
    """Store the state of partitions where expired locks archived records at the delivery
    limit (or moved the start offset), so a restart does not deliver them again."""
    ids = topic_ids(ctx.broker.metadata)
    for (topic, index), before in settled.items():
        part = coordinator.partitions.get((group_id, topic, index))
        if part is not None and (part.start_offset, part.counters.archived) != before:
            await persist(ctx, group_id, ids.id_of(topic), index, part)


def _read_pass(ctx: RequestContext, request: typed.ShareFetchRequest, coordinator: ShareCoordinator,
               keys: list[tuple[str, int]], denied: set[str],
               answers: dict[tuple[uuid.UUID, int], typed.ShareFetchResponsePartitionData],
               settled: dict[tuple[str, int], tuple[int, int]]) -> bool:
    """One read of every partition; True when the answer is ready (records or errors).
    ``settled`` gets each share partition's (start offset, archived count) before its
    first read."""
    group_id, member_id = request.group_id or "", request.member_id or ""
    ids = topic_ids(ctx.broker.metadata)
    replicas = ctx.broker.replica_manager
    read_committed = coordinator.group_config(group_id, "share.isolation.level") == "read_committed"
    bytes_left = request.max_bytes if request.max_bytes > 0 else INT32_MAX
    records_left = request.max_records if request.max_records > 0 else INT32_MAX
    ready = False
    now = now_ms(ctx)
    for name, index in keys:
        topic_id = ids.id_of(name)
        answer = answers.setdefault((topic_id, index), _partition(index))
        if name in denied:
            answer["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            ready = True
            continue
        try:
            leader = replicas.leader_partition(name, index)
        except KafkaError as exc:
            answer["error_code"] = exc.code
            ready = True
            continue
        answer["current_leader"] = {"leader_id": ctx.broker.broker_id, "leader_epoch": leader.leader_epoch}
        if records_left <= 0 or bytes_left <= 0 or answer["acquired_records"]:
            continue
        plog = leader.log
        part = coordinator.loaded(group_id, name, index, leader.leader_epoch)
        if part is None:  # its share coordinator did not answer: nothing handed out
            continue
        if part.start_offset < plog.log_start_offset:  # retention deleted records below it
            part.reset_start(plog.log_start_offset)
        try:
            settled.setdefault((name, index), (part.start_offset, part.counters.archived))
            read = read_and_acquire(part, plog, member_id, bytes_left, records_left, now, read_committed)
        except KafkaError as exc:
            answer["error_code"] = exc.code
            ready = True
            continue
        if read.acquired:
            answer["records"] = read.records
            answer["acquired_records"] = [{"first_offset": a.first, "last_offset": a.last,
                                           "delivery_count": a.delivery_count} for a in read.acquired]
            bytes_left -= len(read.records)
            records_left -= sum(a.last - a.first + 1 for a in read.acquired)
            ready = True
    return ready
