# cython: language_level=3
"""The Produce handler's work per partition, compiled: the walk over the request's
topics and partitions, the leader lookup, and for a plain partition (one magic-2 batch
without producer id, not a control batch, a log with none of the settings that change
an append, no roll and no flush due) the append itself: validation and offset
assignment in place (``records.validate_and_assign``), the segment write, the log end
offset, the producer state's end, the topic's byte and message counts, the purgatory
checks (a Python call only when a fetch waits), the high watermark and the answer's
dict as the response encoder takes it.

Whatever is not plain goes to the handler's Python (``slow.partition``), which does
what it always did, and so does every refusal (``slow.refused``): the compiled lane
only takes an append when its answer is the one the Python path gives. The core
imports nothing of the broker: the handler hands in its pieces (``configure``).
"""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t

from pykfk._core.records import validate_and_assign

cdef object _KafkaError = None
cdef object _LEADER = None
cdef object _INTERNAL = frozenset()
cdef object _NONE = 0
cdef object _NOT_ENOUGH_AFTER = 20
cdef object _WRITE = None
cdef object _TOPIC = None
cdef object _OFFSET_MOVES = None
cdef tuple _VALID_ACKS = (-1, 0, 1)
cdef long long _INT32_MAX = 2**31 - 1
cdef long long _appended = 0
cdef long long _handed_over = 0

# The v2 batch header (src/_core/batch.h): the fields read before validation.
DEF _HEADER_SIZE = 61
DEF _BATCH_LENGTH_AT = 8
DEF _MAGIC_AT = 16
DEF _ATTRIBUTES_AT = 21
DEF _LAST_OFFSET_DELTA_AT = 23
DEF _MAX_TIMESTAMP_AT = 35
DEF _PRODUCER_ID_AT = 43
DEF _ATTR_CONTROL = 0x20


def configure(kafka_error, leader_role, internal_topics, none_code, not_enough_after_code,
              write_operation, topic_resource, offset_moves):
    """The broker's pieces the core must not import: the exception a refusal after the
    append raises (NOT_ENOUGH_REPLICAS_AFTER_APPEND), the leader role's value, the internal topics, the error
    codes, the ACL operation and resource type of a write, and the log's count of
    offset moves (``pykfk.log.log.OFFSET_MOVES``)."""
    global _KafkaError, _LEADER, _INTERNAL, _NONE, _NOT_ENOUGH_AFTER, _WRITE, _TOPIC, _OFFSET_MOVES
    _KafkaError = kafka_error
    _LEADER = leader_role
    _INTERNAL = internal_topics
    _NONE = none_code
    _NOT_ENOUGH_AFTER = not_enough_after_code
    _WRITE = write_operation
    _TOPIC = topic_resource
    _OFFSET_MOVES = offset_moves


def counts():
    """``(appended, handed_over)``: partitions appended by the compiled lane and
    partitions handed to the handler's Python since the process started."""
    return _appended, _handed_over


cdef inline int64_t _be64(const uint8_t *p) noexcept nogil:
    cdef int64_t v = 0
    cdef int i
    for i in range(8):
        v = (v << 8) | p[i]
    return v


cdef inline int32_t _be32(const uint8_t *p) noexcept nogil:
    return <int32_t>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


cdef object _append(object leader, object records, int acks, object timeout_ms, bint single, list pending):
    """One plain partition appended: its answer's dict, or None (nothing done) when the
    append is not plain. Raises what the Python path raises for the same data."""
    global _appended
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef Py_ssize_t size
    cdef int64_t max_timestamp, first_offset, last_offset, next_offset, first_ts, hw, segment_size, segment_base
    cdef int64_t flush_messages, segment_bytes, max_segment_ms
    cdef int32_t batch_length, count
    cdef long long min_isr = 0
    if type(records) is not memoryview:
        return None
    if PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0:
        return None
    try:
        p = <const uint8_t *>view.buf
        size = view.len
        if view.readonly or size < _HEADER_SIZE or p[_MAGIC_AT] != 2:
            return None
        batch_length = _be32(p + _BATCH_LENGTH_AT)
        if <Py_ssize_t>batch_length + 12 != size:  # exactly one batch (more, or a bad length: Python)
            return None
        if (p[_ATTRIBUTES_AT + 1] & _ATTR_CONTROL) or _be64(p + _PRODUCER_ID_AT) >= 0:
            return None  # control batches (refused) and producer batches: Python
        count = _be32(p + _LAST_OFFSET_DELTA_AT) + 1
        max_timestamp = _be64(p + _MAX_TIMESTAMP_AT)
    finally:
        PyBuffer_Release(&view)
    if count <= 0 or max_timestamp < 0:
        return None
    plog, lock, manager, topic, partition, stats, hw_waiters, end_waiters = <tuple>leader.append_lane
    if not plog._plain_appends or not plog._writable:
        return None
    if acks == -1:
        min_isr = manager.min_insync_replicas_for(topic)
        if len(leader.isr) < min_isr:
            return None  # NOT_ENOUGH_REPLICAS, by the Python path
    lock.acquire()
    try:
        flush_messages, segment_bytes, max_segment_ms, max_message_bytes = plog._append_limits
        first_offset = plog._log_end_offset
        last_offset = first_offset + count - 1
        next_offset = last_offset + 1
        if next_offset - <int64_t>plog._recovery_point >= flush_messages:
            return None  # a flush is due: Python
        segment = plog._view.segments[-1]
        if size > segment_bytes:
            return None
        segment_size = segment.size
        if segment_size != 0:
            # The roll decision of Log._roll_reason; any roll is Python's.
            if segment_size > segment_bytes - size:
                return None
            first_ts = segment.first_batch_timestamp
            if first_ts < 0 or max_timestamp - first_ts > max_segment_ms:
                return None
            if segment.is_index_full():
                return None
        segment_base = segment.base_offset
        if last_offset - segment_base > _INT32_MAX:
            return None
        headers = validate_and_assign(records, first_offset, leader.leader_epoch, max_message_bytes,
                                      decompress=plog.validate_compressed, max_batches=1 if single else 0)
        if len(headers) != 1 or headers[0].next_offset != next_offset:
            raise AssertionError("validated batch disagrees with its header")
        try:
            segment.append(records)  # leaves no partial batch behind when the write fails
        except (OSError, ValueError) as exc:
            plog._append_failed(segment, exc, True)
        plog._log_end_offset = next_offset
        _OFFSET_MOVES.count += 1
        state = plog.producer_state
        if next_offset > state.map_end_offset:
            state.map_end_offset = next_offset
        log_start = plog._log_start_offset
    finally:
        lock.release()
    _appended += 1
    stats.bytes_in += size
    stats.messages_in += count
    if leader.remote:
        leader.maybe_advance_high_watermark()
    else:  # no follower: the high watermark moved with the log end offset
        # Always told, waiters or not: a fetch about to park checks the count of appends
        # made since its first read (AppendWaiters.notified).
        hw_waiters.notify(topic, partition)
    end_waiters.notify(topic, partition)
    result = {"index": partition, "error_code": _NONE, "base_offset": first_offset,
              "log_append_time_ms": -1, "log_start_offset": log_start}
    if acks != -1:
        return result
    hw = plog._log_end_offset if plog._high_watermark is None else plog._high_watermark
    if hw > last_offset:
        if len(leader.isr) < min_isr:
            raise _KafkaError(_NOT_ENOUGH_AFTER, f"{topic}-{partition}: NOT_ENOUGH_REPLICAS_AFTER_APPEND after the append")
        return result
    pending.append((result, leader.wait_for_replication(next_offset, max(timeout_ms, 0) / 1000)))
    return result


def produce(ctx, request, slow_factory):
    """The request's partitions answered: ``(responses, slow, pending)``. ``slow`` is
    None when every partition took the compiled lane, else the object
    ``slow_factory(ctx, request, pending)`` made for the first that did not, whose
    ``partition(name, index, records, results, denied, internal)`` and
    ``refused(name, index, exc, results)`` (any exception an append raised) did the
    Python path's work (it holds what
    the handler finishes: deferred transactional partitions, leader hints). ``pending``:
    the acks=all waits, ``(entry, coroutine)``."""
    global _handed_over
    transactional_id, acks, timeout_ms, topics = request
    replicas = ctx.broker.replica_manager
    cdef int version = ctx.api_version
    cdef bint single = version >= 3
    cdef bint plain = transactional_id is None and acks in _VALID_ACKS
    cdef bint fast, denied, internal
    cdef int acks_c = acks if plain else 0
    authorizer = ctx.broker.authorizer
    leaders = replicas.partitions
    cdef list responses = []
    cdef dict by_topic = {}
    cdef list pending = []
    slow = None
    for topic, partitions in topics:
        if type(topic) is str:
            name = topic
        else:
            if slow is None:
                slow = slow_factory(ctx, request, pending)
            name = slow.named(topic, partitions, responses)
            if name is None:
                continue
        results = by_topic.get(name)
        if results is None:
            results = by_topic[name] = []
            if version >= 13:
                responses.append({"name": name, "partition_responses": results, "topic_id": topic})
            else:
                responses.append({"name": name, "partition_responses": results})
        denied = authorizer is not None and not ctx.allowed(_WRITE, _TOPIC, name)
        internal = name in _INTERNAL
        fast = plain and not denied and not internal
        for index, records in partitions:
            if fast:
                leader = leaders.get((name, index))
                if leader is not None and leader.role == _LEADER:
                    try:
                        result = _append(leader, records, acks_c, timeout_ms, single, pending)
                    except Exception as exc:  # answered as the Python path answers it
                        if slow is None:
                            slow = slow_factory(ctx, request, pending)
                        slow.refused(name, index, exc, results)
                        continue
                    if result is not None:
                        results.append(result)
                        continue
            _handed_over += 1
            if slow is None:
                slow = slow_factory(ctx, request, pending)
            slow.partition(name, index, records, results, denied, internal)
    return responses, slow, pending
