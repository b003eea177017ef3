"""Produce (key 0): append each partition's record batches through the replica manager.

The batches are appended as the client sent them (compressed stays compressed): the log
validates framing and CRC and assigns offsets in place inside the request frame, so no
record is copied or re-encoded. Only a partition's leader appends
(NOT_LEADER_OR_FOLLOWER elsewhere); acks=1 is answered after the local append, acks=all
once the in-sync replicas have the batch (at once when the partition has no follower,
as on a standalone broker), with ``min.insync.replicas`` giving NOT_ENOUGH_REPLICAS /
NOT_ENOUGH_REPLICAS_AFTER_APPEND (``pykfk.cluster.replica``). acks=0 gets no response.

From v3 a partition's data must be exactly one magic-2 batch (Kafka's
ProduceRequest.validateRecords); v0-2 may carry legacy magic 0/1 message sets, which are
validated with CRC-32 and converted to v2 batches. Every check of the data is the log's
(``Log.append(from_client=True)``, ``pykfk.log.validation``): this handler only routes.
A partition whose data is refused gets the error code and, from v8 (KIP-467), the
``error_message`` and, when single records broke a rule (a keyless record on a compacted
topic, a timestamp outside the topic's window), ``record_errors`` naming each by its
index in the batch.

The walk over a request's partitions is compiled (``pykfk._core.append_path.handle``),
and so is a plain append (one magic-2 batch without producer id, or an idempotent
producer's next batch in sequence, to a log without compaction, LogAppendTime, a
timestamp window, recompression or a flush policy, with no roll due): validation,
offsets, the segment write, the log end offset, the producer state, the purgatory checks
and the answer's entry. Everything else, and every refusal, is ``_Slow``'s, which does
what the Log and the Partition do for any append.

Requests are decoded by the compiled walk ``pykfk._core.wire.decode_produce`` into
``(transactional_id, acks, timeout_ms, [(topic, [(partition, records)])])`` and answered
by ``encode_produce_response``. The handler itself is compiled
(``append_path.handle``): when every partition took the lane, no quota applies and
nothing waits for replication, it answers with no Python frame at all (decode, handle
and encode are compiled functions). Whatever is left comes back here (``_finish``):
leader hints, quotas, transactional partitions whose coordinator another broker is,
acks=all waits; when something must be waited for, the answer is a coroutine.

A request carrying transactional batches needs a transactional id, and WRITE on it when
ACLs are on (Kafka's KafkaApis.handleProduceRequest); else every partition is answered
TRANSACTIONAL_ID_AUTHORIZATION_FAILED and nothing is appended
(``_may_write_transactions``, ``_refuse_transactional``).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING

from pykfk._core import append_path
from pykfk._core.errors import CoreError
from pykfk._core.wire import decode_produce
from pykfk.cluster.replica import LEADER
from pykfk.cluster.topics import INTERNAL_TOPICS
from pykfk.errors import ErrorCode, KafkaError, error_for_core_exception
from pykfk.log.log import OFFSET_MOVES, AppendInfo
from pykfk.log.producer_state import BatchMetadata
from pykfk.log.validation import InvalidRecords
from pykfk.protocol import typed
from pykfk.security.acl import Operation, ResourceType
from pykfk.security.quotas import PRODUCER_BYTE_RATE
from pykfk.server.dispatch import CloseConnection, RequestContext
from pykfk.server.handlers.metadata import topic_ids

if TYPE_CHECKING:
    from pykfk.cluster.replica import Partition

API_KEY = 0
VERSIONS = (0, 13)
# v10+: a partition answered NOT_LEADER_OR_FOLLOWER names its leader (KIP-951); v13+
# names topics by id (KIP-516).
_LEADER_HINTS_FROM = 10
_TOPIC_IDS_FROM = 13

log = logging.getLogger("pykfk.server")

_VALID_ACKS = (-1, 0, 1)
_NONE = ErrorCode.NONE
# Refusals by the log's record validation: answered with their message (Kafka's
# RecordValidationException); other errors with the code alone.
_VALIDATION_ERRORS = (ErrorCode.INVALID_RECORD, ErrorCode.INVALID_TIMESTAMP)

# The compiled decoder's walk (pykfk._core.wire.decode_produce), in place of the
# generic decoder's typed.ProduceRequest: (transactional_id, acks, timeout_ms, topics).
# Topics by name (v0-12) or by id (v13+).
ProduceRequest = tuple[str | None, int, int, list[tuple[str | uuid.UUID, list[tuple[int, memoryview | None]]]]]
PartitionResponse = typed.ProduceResponsePartitionProduceResponse
# A partition whose acks=all answer is still pending: its response entry and the wait.
Pending = tuple[PartitionResponse, Coroutine[None, None, ErrorCode]]


# The request body as ``(transactional_id, acks, timeout_ms, [(topic, [(partition,
# records)])])``, records as views of the frame; ProtocolError for bad bytes.
decode_request = decode_produce
# The response frame as chunks (the same bytes as the generic encoder).
encode_response = append_path.encode_response
# The response body now, None (acks=0) or a coroutine giving it when something must be
# waited for; the common case compiled, the rest by ``_finish``.
handle: Callable[[RequestContext, ProduceRequest], typed.ProduceResponse | None
                 | Coroutine[None, None, typed.ProduceResponse | None]] = append_path.handle


# _check_transaction's answer when the transactional id's coordinator is another broker.
_ASK_COORDINATOR = -1
# A deferred partition: its topic, index, records (copied), response entry, producer id and epoch.
Deferred = tuple[str, int, bytearray, PartitionResponse, int, int]


def _check_transaction(ctx: RequestContext, transactional_id: str, leader: Partition,
                       producer: tuple[int, int]) -> int:
    """A transactional batch must belong to its producer's open transaction, with the
    partition added to it (Kafka's KIP-890 verification): NONE, INVALID_TXN_STATE,
    INVALID_PRODUCER_EPOCH or INVALID_PRODUCER_ID_MAPPING, or _ASK_COORDINATOR when the
    id's coordinator is another broker. ``producer``: the batch's producer id and epoch,
    as ``Partition.transaction_to_verify`` gave them."""
    coordinator = ctx.broker.transaction_coordinator
    if coordinator is None:
        return _NONE
    if ctx.api_version >= 12 or not coordinator.is_coordinator(transactional_id):
        return _ASK_COORDINATOR  # v12+ (transaction version 2): the coordinator adds the partition
    return int(coordinator.verify_partition(transactional_id, *producer, (leader.topic, leader.partition)))


def _success(info: AppendInfo, partition: int) -> PartitionResponse:
    return {
        "index": partition,
        "error_code": _NONE,
        "base_offset": info.first_offset,
        "log_append_time_ms": info.log_append_time_ms,
        "log_start_offset": info.log_start_offset,
    }


def _error(code: int, partition: int) -> PartitionResponse:
    return {"index": partition, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1}


def _refused(exc: KafkaError | CoreError, partition: int) -> PartitionResponse:
    """A partition whose append failed: the code and, when the log's validation refused
    the records (INVALID_RECORD, INVALID_TIMESTAMP; v8+, KIP-467), the message, with
    each offending record's index in its batch when single records broke a rule, so a
    client fails exactly those. Other errors carry no message, as from Kafka."""
    code = exc.code if isinstance(exc, KafkaError) else error_for_core_exception(exc)
    result = _error(code, partition)
    if code in _VALIDATION_ERRORS:
        result["error_message"] = exc.message if isinstance(exc, KafkaError) else str(exc)
    if isinstance(exc, InvalidRecords):
        result["record_errors"] = [{"batch_index": index, "batch_index_error_message": message}
                                   for index, message in exc.record_errors]
    return result


def _named(ctx: RequestContext, topic_id: uuid.UUID, partitions: list[tuple[int, memoryview | None]],
           responses: list[typed.ProduceResponseTopicProduceResponse]) -> str | None:
    """The name of the topic a v13+ request names by id; None (its partitions answered
    UNKNOWN_TOPIC_ID) when no topic has that id."""
    name = topic_ids(ctx.broker.metadata).name_of(topic_id)
    if name is None:
        responses.append({"name": "", "topic_id": topic_id, "partition_responses": [
            _error(ErrorCode.UNKNOWN_TOPIC_ID, index) for index, _records in partitions]})
    return name


def _leader_hints(ctx: RequestContext, body: typed.ProduceResponse,
                  moved: list[tuple[str, PartitionResponse]]) -> None:
    """KIP-951 (v10+): each partition answered NOT_LEADER_OR_FOLLOWER carries the
    leader and epoch the metadata knows, and the response the address of those leaders
    on the listener the client came in on, so the client sends there without a
    Metadata round trip first. A partition without a known leader carries none."""
    store = ctx.broker.metadata
    leaders: set[int] = set()
    for name, result in moved:
        state = store.partition_state(name, result["index"])
        if state is not None and state.leader >= 0:
            result["current_leader"] = {"leader_id": state.leader, "leader_epoch": state.leader_epoch}
            leaders.add(state.leader)
    endpoints: list[typed.ProduceResponseNodeEndpoint] = []
    for broker in store.brokers():
        address = broker.address(ctx.session.listener_name) if broker.node_id in leaders else None
        if address is not None:
            endpoints.append({"node_id": broker.node_id, "host": address[0], "port": address[1], "rack": broker.rack})
    if endpoints:
        body["node_endpoints"] = endpoints


class _Slow:
    """The partitions of a request the compiled lane (``pykfk._core.append_path``)
    leaves to Python: anything but a plain append by this broker as leader (a
    transactional id, invalid acks, an ACL refusal, an internal topic, no leadership
    here, transactional batches and producer batches other than an idempotent producer's
    next in sequence, legacy message sets, settings that change an append, a roll or a
    flush due) and every refusal, with what the handler finishes after the walk:
    the deferred transactional partitions and the leader hints."""

    __slots__ = ("acks", "ctx", "deferred", "moved", "pending", "timeout_ms", "transactional_id")

    def __init__(self, ctx: RequestContext, request: ProduceRequest, pending: list[Pending]):
        self.ctx = ctx
        self.transactional_id, self.acks, self.timeout_ms, _topics = request
        self.pending = pending
        self.deferred: list[Deferred] | None = None
        self.moved: list[tuple[str, PartitionResponse]] | None = None

    def named(self, topic_id: uuid.UUID, partitions: list[tuple[int, memoryview | None]],
              responses: list[typed.ProduceResponseTopicProduceResponse]) -> str | None:
        return _named(self.ctx, topic_id, partitions, responses)

    def partition(self, name: str, index: int, records: memoryview | None, results: list[PartitionResponse],
                  denied: bool, internal: bool) -> None:
        """One partition by the Python path: its answer appended to ``results`` (or
        deferred until the transaction coordinator answers)."""
        ctx = self.ctx
        acks = self.acks
        if acks not in _VALID_ACKS or denied:
            results.append(_error(ErrorCode.TOPIC_AUTHORIZATION_FAILED if denied
                                  else ErrorCode.INVALID_REQUIRED_ACKS, index))
            return
        try:
            if internal:
                # Committed offsets are written by the group coordinator only; Kafka
                # refuses client writes to its internal topics the same way.
                raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"{name} is an internal topic")
            leader = ctx.broker.replica_manager.leader_partition(name, index)  # NOT_LEADER_OR_FOLLOWER first
            transactional_id = self.transactional_id
            if transactional_id is not None:
                producer = leader.transaction_to_verify(records)
                code = _NONE if producer is None else _check_transaction(ctx, transactional_id, leader, producer)
                if code == _ASK_COORDINATOR:
                    # Appended once the coordinator answers; the frame may be reused.
                    assert records is not None and producer is not None  # null records need no coordinator
                    self.deferred = self.deferred or []
                    result = _error(_NONE, index)
                    self.deferred.append((name, index, bytearray(records), result, *producer))
                    results.append(result)
                    return
                if code != _NONE:
                    raise KafkaError(code, f"transactional write to {name}-{index} outside its transaction")
            info, wait = leader.append_records(records, acks, self.timeout_ms,
                                               require_single_batch=ctx.api_version >= 3, from_client=True)
            result = _success(info, index)
            if wait is not None:
                self.pending.append((result, wait))
            results.append(result)
        except Exception as exc:  # noqa: BLE001 - refused says which: a Kafka error code, or a logged failure
            self.refused(name, index, exc, results)

    def refused(self, name: str, index: int, exc: Exception, results: list[PartitionResponse]) -> None:
        """A partition whose append raised ``exc``: its answer appended to ``results``."""
        replicas = self.ctx.broker.replica_manager
        if not isinstance(exc, (KafkaError, CoreError)):
            log.error("produce to %s-%d failed", name, index, exc_info=exc)
            results.append(_error(ErrorCode.UNKNOWN_SERVER_ERROR, index))
            replicas.topic_stats.for_topic(name).failed_produce_requests += 1
            return
        result = _refused(exc, index)
        results.append(result)
        replicas.topic_stats.for_topic(name).failed_produce_requests += 1
        log.debug("produce to %s-%d refused: %s", name, index, exc)
        if result["error_code"] == ErrorCode.NOT_LEADER_OR_FOLLOWER and self.ctx.api_version >= _LEADER_HINTS_FROM:
            self.moved = self.moved or []
            self.moved.append((name, result))


def _finish(ctx: RequestContext, request: ProduceRequest, body: typed.ProduceResponse, slow: _Slow | None,
            pending: list[Pending]) -> typed.ProduceResponse | None | Coroutine[None, None, typed.ProduceResponse | None]:
    """``append_path.handle``'s answer when the walk left anything to do: the leader
    hints and deferred transactional partitions of ``slow`` (the Python path's, None when
    every partition took the lane), the quota, the acks=all waits."""
    deferred = None
    if slow is not None:
        if slow.moved is not None:
            _leader_hints(ctx, body, slow.moved)
        deferred = slow.deferred
    if ctx.broker.quotas.active:
        body["throttle_time_ms"] = ctx.charge(PRODUCER_BYTE_RATE, sum(
            len(records) for _name, partitions in request[3] for _index, records in partitions if records is not None))
    acks = request[1]
    if deferred is not None:
        transactional_id = request[0]
        assert transactional_id is not None
        return _verified_appends(ctx, transactional_id, deferred, body, pending, acks, request[2])
    if pending:
        return _after_replication(body, pending)
    return _answer(acks, body)


async def _verified_appends(ctx: RequestContext, transactional_id: str, deferred: list[Deferred],
                            body: typed.ProduceResponse, pending: list[Pending], acks: int,
                            timeout_ms: int) -> typed.ProduceResponse | None:
    """The partitions whose transaction another broker coordinates: asked there
    (AddPartitionsToTxn v4, verify_only), then appended like the others."""
    version = ctx.api_version
    by_producer: dict[tuple[int, int], list[Deferred]] = {}
    for item in deferred:
        by_producer.setdefault((item[4], item[5]), []).append(item)
    for (producer_id, epoch), items in by_producer.items():
        codes = await ctx.broker.verify_transaction(transactional_id, producer_id, epoch,
                                                    [(name, index) for name, index, *_rest in items],
                                                    add=version >= 12)
        for name, index, records, result, _pid, _epoch in items:
            code = codes.get((name, index), ErrorCode.NOT_ENOUGH_REPLICAS)
            try:
                if code != _NONE:
                    raise KafkaError(code, f"transactional write to {name}-{index} outside its transaction")
                leader = ctx.broker.replica_manager.leader_partition(name, index)
                info, wait = leader.append_records(records, acks, timeout_ms, require_single_batch=version >= 3,
                                                   from_client=True)
                result.update(_success(info, index))
                if wait is not None:
                    pending.append((result, wait))
            except (KafkaError, CoreError) as exc:
                result.update(_refused(exc, index))
    if pending:
        return await _after_replication(body, pending)
    return _answer(acks, body)


async def _after_replication(body: typed.ProduceResponse, pending: list[Pending]) -> typed.ProduceResponse:
    """acks=all: every waiting partition's final code, the waits overlapping."""
    codes = await asyncio.gather(*(wait for _result, wait in pending))
    for (result, _wait), code in zip(pending, codes):
        if code != _NONE:
            result.update(_error(code, result["index"]))
    return body


def _may_write_transactions(ctx: RequestContext, transactional_id: str | None) -> bool:
    """A request with transactional batches: whether it may write them. Kafka
    (KafkaApis.handleProduceRequest) wants a transactional id, and WRITE on it."""
    return transactional_id is not None and ctx.allowed(Operation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                        transactional_id)


def _refuse_transactional(ctx: RequestContext, request: ProduceRequest) -> typed.ProduceResponse | None:
    """The answer to a request whose transactional batches may not be written: every
    partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED, nothing appended (Kafka answers the
    whole request so, before looking at any topic); acks=0 closes the connection."""
    code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    responses: list[typed.ProduceResponseTopicProduceResponse] = []
    for topic, partitions in request[3]:
        results = []
        for index, _records in partitions:
            result = _error(code, index)
            result["error_message"] = "Transactional Id authorization failed."
            results.append(result)
        if isinstance(topic, str):
            responses.append({"name": topic, "partition_responses": results})
        else:
            responses.append({"name": "", "topic_id": topic, "partition_responses": results})
    log.debug("produce with transactional batches refused (transactional id %r)", request[0])
    return _answer(request[1], {"responses": responses, "throttle_time_ms": 0})


def _answer(acks: int, body: typed.ProduceResponse) -> typed.ProduceResponse | None:
    if acks == 0:
        # No response to carry an error: Kafka closes the connection so the client notices.
        if any(p["error_code"] for t in body["responses"] for p in t["partition_responses"]):
            raise CloseConnection("a produce request with acks=0 failed")
        return None
    return body


append_path.configure(KafkaError, LEADER, INTERNAL_TOPICS, ErrorCode.NONE, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                      Operation.WRITE, ResourceType.TOPIC, OFFSET_MOVES, BatchMetadata, _Slow, _finish,
                      _may_write_transactions, _refuse_transactional)
