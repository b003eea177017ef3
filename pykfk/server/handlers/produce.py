"""Produce (key 0): append each partition's record batches to its log.

The batches are appended as the client sent them (compressed stays compressed): the log
validates framing and CRC and assigns offsets in place inside the request frame, so no
record is copied or re-encoded. Standalone: acks=1 and acks=all are both answered after
the local append (the high watermark is the log end offset). acks=0 gets no response.

From v3 a partition's data must be exactly one magic-2 batch (Kafka's
ProduceRequest.validateRecords); v0-2 may carry legacy magic 0/1 message sets, which are
validated with CRC-32 and converted to v2 batches before the append.

In a cluster (``broker.replica_manager`` set) only the partition's leader appends
(NOT_LEADER_OR_FOLLOWER elsewhere), acks=all waits until the in-sync replicas have the
batch, all partitions of the request at once, and ``min.insync.replicas`` gives
NOT_ENOUGH_REPLICAS / NOT_ENOUGH_REPLICAS_AFTER_APPEND (``pykfk.cluster.replica``).

Requests are decoded by the compiled walk ``pykfk._core.wire.decode_produce`` (the
generic codec when the core is not built) into ``(transactional_id, acks, timeout_ms,
[(topic, [(partition, records)])])`` and answered by ``encode_produce_response``. Without
a cluster nothing waits, so ``handle`` answers at once (no task, no event loop turn); in a
cluster it returns a coroutine.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pykfk._core import records as core_records
from pykfk._core.errors import CoreError
from pykfk.errors import ErrorCode, KafkaError, error_for_core_exception
from pykfk.protocol.messages import API_SPECS
from pykfk.protocol.types import Struct
from pykfk.server.dispatch import CloseConnection

try:
    from pykfk._core.wire import decode_produce as _decode_compiled
    from pykfk._core.wire import encode_produce_response as _encode_compiled
except ImportError:  # core not built: the generic codec gives the same values
    _decode_compiled = None
    _encode_compiled = None

API_KEY = 0
VERSIONS = (0, 7)

log = logging.getLogger("pykfk.server")

_SPEC = API_SPECS[API_KEY]
_VALID_ACKS = (-1, 0, 1)
_NONE = ErrorCode.NONE


def decode_request(view: memoryview, offset: int, version: int) -> tuple:
    """The request body as ``(transactional_id, acks, timeout_ms, [(topic, [(partition,
    records)])])``, records as views of the frame. ProtocolError for bad bytes."""
    if _decode_compiled is not None:
        return _decode_compiled(view, offset, version)
    req = _SPEC.decode_request(view, offset, version)
    return (
        req.transactional_id,
        req.acks,
        req.timeout_ms,
        [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in req.topic_data],
    )


def encode_response(version: int, correlation_id: int, body: dict) -> list:
    """The response frame as chunks (the same bytes as the generic encoder)."""
    if _encode_compiled is not None:
        return [_encode_compiled(version, correlation_id, body)]
    from pykfk.protocol.framing import encode_response as encode_generic

    return encode_generic(API_KEY, version, correlation_id, body)


def _request_struct(request: tuple) -> Struct:
    """The decoded tuple as the generic codec's Struct (the cluster path reads fields)."""
    transactional_id, acks, timeout_ms, topics = request
    return Struct(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            Struct(name=name, partition_data=[Struct(index=i, records=r) for i, r in partitions])
            for name, partitions in topics
        ],
    )


def _check_v3_records(buf: Any) -> None:
    if len(buf) < 17:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, "record data is shorter than a batch header")
    if core_records.is_legacy(buf):
        raise KafkaError(ErrorCode.INVALID_RECORD, "Produce v3+ requires magic 2 record batches")
    count, _complete = core_records.scan_batches(buf)
    if count != 1:
        raise KafkaError(
            ErrorCode.INVALID_RECORD,
            f"Produce v3+ requires exactly one record batch per partition, got {count}",
        )


def _checked_records(records: Any, version: int) -> Any:
    if records is None or len(records) == 0:
        raise KafkaError(ErrorCode.INVALID_RECORD, "empty record data")
    if version >= 3:
        _check_v3_records(records)
    elif core_records.is_legacy(records):
        records = core_records.convert_legacy(records)
    return records


def _refuse_internal(broker: Any, topic: str) -> None:
    # Committed offsets are written by the group coordinator only; Kafka refuses client
    # writes to its internal topics the same way.
    if broker.is_internal_topic(topic):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"{topic} is an internal topic")


def _append(broker: Any, topic: str, partition: int, records: Any, version: int) -> dict:
    """One partition's append on a standalone broker; its response entry."""
    if broker.is_internal_topic(topic):
        _refuse_internal(broker, topic)
    plog = broker.get_log(topic, partition)
    if plog is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not on this broker")
    if version >= 3 and records is not None and len(records):
        _check_v3_records(records)  # _checked_records' common case, one call less
    else:
        records = _checked_records(records, version)
    info = plog.append(records)
    broker.appended(topic, partition)
    return _success(info, partition)


async def _append_replicated(
    replicas: Any, topic: str, partition: int, records: Any, version: int, acks: int, timeout_ms: int
) -> dict:
    replicas.leader_partition(topic, partition)  # NOT_LEADER_OR_FOLLOWER before any check
    records = _checked_records(records, version)
    return _success(await replicas.append(topic, partition, records, acks, timeout_ms), partition)


def _success(info: Any, partition: int) -> dict:
    return {
        "index": partition,
        "error_code": _NONE,
        "base_offset": info.first_offset,
        "log_append_time_ms": info.log_append_time_ms,
        "log_start_offset": info.log_start_offset,
    }


def _error(code: int, partition: int) -> dict:
    return {"index": partition, "error_code": code, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1}


async def _produce_partition(ctx: Any, request: Any, replicas: Any, topic: str, pdata: Any) -> dict:
    acks = request.acks
    if acks not in _VALID_ACKS:
        result = _error(ErrorCode.INVALID_REQUIRED_ACKS, pdata.index)
    else:
        try:
            if replicas is None:
                result = _append(ctx.broker, topic, pdata.index, pdata.records, ctx.api_version)
            else:
                _refuse_internal(ctx.broker, topic)
                result = await _append_replicated(
                    replicas, topic, pdata.index, pdata.records, ctx.api_version, acks, request.timeout_ms
                )
        except KafkaError as exc:
            result = _error(exc.code, pdata.index)
            log.debug("produce to %s-%d failed: %s", topic, pdata.index, exc)
        except CoreError as exc:
            result = _error(error_for_core_exception(exc), pdata.index)
            log.debug("produce to %s-%d rejected: %s", topic, pdata.index, exc)
        except Exception:
            log.exception("produce to %s-%d failed", topic, pdata.index)
            result = _error(ErrorCode.UNKNOWN_SERVER_ERROR, pdata.index)
    return result


def handle(ctx: Any, request: tuple) -> Any:
    """The response body now (standalone), or a coroutine giving it (cluster)."""
    if getattr(ctx.broker, "replica_manager", None) is not None:
        return _handle_replicated(ctx, _request_struct(request))
    return _handle_local(ctx, request)


def _handle_local(ctx: Any, request: tuple) -> dict | None:
    """Standalone: every partition is appended here and now; nothing waits."""
    _transactional_id, acks, _timeout_ms, topics = request
    broker = ctx.broker
    version = ctx.api_version
    valid_acks = acks in _VALID_ACKS
    responses: list[dict] = []
    by_topic: dict[str, list] = {}
    for name, partitions in topics:
        results = by_topic.get(name)
        if results is None:
            results = by_topic[name] = []
            responses.append({"name": name, "partition_responses": results})
        for index, records in partitions:
            if not valid_acks:
                results.append(_error(ErrorCode.INVALID_REQUIRED_ACKS, index))
                continue
            try:
                results.append(_append(broker, name, index, records, version))
            except KafkaError as exc:
                results.append(_error(exc.code, index))
                log.debug("produce to %s-%d failed: %s", name, index, exc)
            except CoreError as exc:
                results.append(_error(error_for_core_exception(exc), index))
                log.debug("produce to %s-%d rejected: %s", name, index, exc)
            except Exception:
                log.exception("produce to %s-%d failed", name, index)
                results.append(_error(ErrorCode.UNKNOWN_SERVER_ERROR, index))
    if acks == 0:
        # No response to carry an error: Kafka closes the connection so the client notices.
        if any(p["error_code"] for t in responses for p in t["partition_responses"]):
            raise CloseConnection("a produce request with acks=0 failed")
        return None
    return {"responses": responses, "throttle_time_ms": 0}


async def _handle_replicated(ctx: Any, request: Any) -> dict | None:
    acks = request.acks
    replicas = getattr(ctx.broker, "replica_manager", None)
    work = [
        (topic.name, _produce_partition(ctx, request, replicas, topic.name, pdata))
        for topic in request.topic_data
        for pdata in topic.partition_data
    ]
    if replicas is None or len(work) == 1:
        results = [await coro for _name, coro in work]  # no waiting, or one wait: no tasks needed
    else:
        results = await asyncio.gather(*(coro for _name, coro in work))  # acks=all waits overlap
    responses: list[dict] = []
    by_topic: dict[str, list] = {}
    for (name, _coro), result in zip(work, results):
        if name not in by_topic:
            by_topic[name] = []
            responses.append({"name": name, "partition_responses": by_topic[name]})
        by_topic[name].append(result)
    if acks == 0:
        # No response to carry an error: Kafka closes the connection so the client notices.
        if any(p["error_code"] for t in responses for p in t["partition_responses"]):
            raise CloseConnection("a produce request with acks=0 failed")
        return None
    return {"responses": responses, "throttle_time_ms": 0}
