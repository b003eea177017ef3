# cython: language_level=3
"""The Produce handler's work per partition, compiled: the walk over the request's
topics and partitions, the leader lookup, and for a plain partition (one magic-2 batch
without producer id or an idempotent producer's next in sequence, not a control or
transactional batch, a log with none of the settings that change an append, no roll
and no flush due) the append itself: validation and offset assignment in place
(``records.validate_and_assign``), the segment write (``Segment.append_active``, which
also makes the roll decision), the log end offset and the producer state, the topic's
byte and message counts, the purgatory checks, the high watermark and the answer's dict
as the response encoder takes it. The log's state it reads and moves is the log's own
(``LogState``, the compiled base of ``pykfk.log.log.Log``), under the log's lock.

Whatever is not plain goes to the handler's Python (``slow.partition``), which does
what it always did, and so does every refusal (``slow.refused``): the compiled lane
only takes an append when its answer is the one the Python path gives. The core
imports nothing of the broker: the handler hands in its pieces (``configure``).

The handler itself is compiled too (``handle``, the module's ``handle`` of
``pykfk.server.handlers.produce``): the walk, the response body and, when nothing is left
to do (every partition appended by the lane, no quota, nothing waiting for replication),
the answer, with no Python frame. What is left goes back to the handler's Python
(``finish``): leader hints, quotas, transactional partitions whose coordinator must be
asked, acks=all waits. So does a request carrying transactional batches without a
transactional id its principal may write (``refuse_transactional``, Kafka's rule).
``encode_response`` gives the answer's frame as the request lane sends it.
"""

from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t

from threading import RLock

from pykfk._core.records import validate_and_assign
from pykfk._core.wire import encode_produce_response


cdef extern from "Python.h":
    """
    /* The bytes a memoryview shows, read without a new buffer export: NULL unless it
       is a live (not released), writable, contiguous view of bytes. */
    static const unsigned char *__pk_view_bytes(PyObject *obj, Py_ssize_t *size) {
        PyMemoryViewObject *mv = (PyMemoryViewObject *)obj;
        Py_buffer *view = &mv->view;
        if (mv->flags & _Py_MEMORYVIEW_RELEASED || view->readonly || view->itemsize != 1
                || (view->ndim > 1) || (view->strides != NULL && view->ndim == 1 && view->strides[0] != 1))
            return NULL;
        *size = view->len;
        return (const unsigned char *)view->buf;
    }
    """
    const uint8_t *_view_bytes "__pk_view_bytes"(object obj, Py_ssize_t *size)


cdef extern from "Python.h":
    """
    /* A log's lock (a threading.RLock) taken and given back through the C functions of
       its type's acquire and release, as ``lock.acquire()`` and ``lock.release()`` call
       them, without the method lookup and call of each; any other lock type by its
       methods. */
    static PyTypeObject *__pk_rlock_type = NULL;
    static PyCFunctionWithKeywords __pk_rlock_acquire = NULL;
    static PyCFunction __pk_rlock_release = NULL;
    static PyObject *__pk_no_args = NULL;

    static int __pk_lock_setup(PyObject *lock) {
        const int kinds = METH_VARARGS | METH_KEYWORDS | METH_NOARGS | METH_O | METH_FASTCALL | METH_METHOD;
        PyTypeObject *tp = Py_TYPE(lock);
        PyObject *acquire = PyDict_GetItemString(tp->tp_dict, "acquire");
        PyObject *release = PyDict_GetItemString(tp->tp_dict, "release");
        if (acquire == NULL || release == NULL || !Py_IS_TYPE(acquire, &PyMethodDescr_Type)
                || !Py_IS_TYPE(release, &PyMethodDescr_Type))
            return 0;
        PyMethodDef *a = ((PyMethodDescrObject *)acquire)->d_method;
        PyMethodDef *r = ((PyMethodDescrObject *)release)->d_method;
        if ((a->ml_flags & kinds) != (METH_VARARGS | METH_KEYWORDS) || (r->ml_flags & kinds) != METH_NOARGS)
            return 0;
        __pk_no_args = PyTuple_New(0);
        if (__pk_no_args == NULL)
            return -1;
        __pk_rlock_acquire = (PyCFunctionWithKeywords)(void (*)(void))a->ml_meth;
        __pk_rlock_release = r->ml_meth;
        Py_INCREF(tp);
        __pk_rlock_type = tp;
        return 1;
    }

    static int __pk_lock_acquire(PyObject *lock) {
        PyObject *done = Py_TYPE(lock) == __pk_rlock_type ? __pk_rlock_acquire(lock, __pk_no_args, NULL)
                                                          : PyObject_CallMethod(lock, "acquire", NULL);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
        return 0;
    }

    static int __pk_lock_release(PyObject *lock) {
        PyObject *done = Py_TYPE(lock) == __pk_rlock_type ? __pk_rlock_release(lock, NULL)
                                                          : PyObject_CallMethod(lock, "release", NULL);
        if (done == NULL)
            return -1;
        Py_DECREF(done);
        return 0;
    }
    """
    int _lock_setup "__pk_lock_setup"(object lock) except -1
    int _lock_acquire "__pk_lock_acquire"(object lock) except -1
    int _lock_release "__pk_lock_release"(object lock) except -1


_lock_setup(RLock())  # the type of Log._lock

cdef object _KafkaError = None
cdef object _LEADER = None
cdef object _INTERNAL = frozenset()
cdef object _NONE = 0
cdef object _NOT_ENOUGH_AFTER = 20
cdef object _WRITE = None
cdef object _TOPIC = None
cdef object _OFFSET_MOVES = None
cdef object _BatchMetadata = None
# The handler's Python (pykfk.server.handlers.produce), for what the compiled path leaves.
cdef object _slow_factory = None
cdef object _finish = None
cdef object _may_write_transactions = None
cdef object _refuse_transactional = None
cdef object _encode = encode_produce_response
cdef object _validate_and_assign = validate_and_assign
cdef object _tuple_new = tuple.__new__
# A partition's answer as the response encoder takes it; the lane fills in a copy.
cdef dict _ANSWER = {"index": 0, "error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
                     "log_start_offset": -1}
# The response body and a topic's entry, copied (a copy of a small dict costs less
# than a new one filled key by key).
cdef dict _BODY = {"responses": None, "throttle_time_ms": 0}
cdef dict _TOPIC_ENTRY = {"name": None, "partition_responses": None}
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
DEF _PRODUCER_EPOCH_AT = 51
DEF _BASE_SEQUENCE_AT = 53
DEF _ATTR_CONTROL = 0x20
DEF _ATTR_TRANSACTIONAL = 0x10


cdef class LogState:
    """The state of one partition's log that an append reads and moves, as C fields: the
    base of ``pykfk.log.log.Log``, whose Python code reads and writes the same fields
    (one truth, no copy). The compiled lane reads them without an attribute lookup.

    ``_view`` is the log's segment list snapshot; setting it also sets ``_active``, its
    last segment (None while the log has none). The four limits are what the lane
    needs of the log's settings (``Log.config`` sets them); ``_plain_appends`` says
    whether the settings leave an append to the lane at all."""

    cdef public int64_t _log_end_offset
    cdef public int64_t _log_start_offset
    cdef public int64_t _recovery_point
    cdef public object _high_watermark
    cdef public bint _writable
    cdef public bint _plain_appends
    cdef public int64_t _flush_messages
    cdef public int64_t _segment_bytes
    cdef public int64_t _max_segment_ms
    cdef public int64_t _max_message_bytes
    cdef public object _lock
    cdef public object producer_state
    cdef object _view_
    cdef readonly object _active

    @property
    def _view(self):
        return self._view_

    @_view.setter
    def _view(self, view):
        segments = view.segments
        self._active = segments[-1] if segments else None
        self._view_ = view


cdef class LeaderState:
    """What the Produce lane reads of a partition replica, as C fields: the base of
    ``pykfk.cluster.replica.Partition``, whose Python code reads and writes the same
    fields. ``append_lane``: the pieces of a partition that never change (its log, the
    replica manager, topic, index, the topic's metrics and the two purgatories)."""

    cdef public object role
    cdef public int64_t leader_epoch
    cdef public object isr
    cdef public object remote
    cdef public tuple append_lane


def configure(kafka_error, leader_role, internal_topics, none_code, not_enough_after_code,
              write_operation, topic_resource, offset_moves, batch_metadata, slow_factory, finish,
              may_write_transactions, refuse_transactional):
    """The broker's pieces the core must not import: the exception a refusal after the
    append raises (NOT_ENOUGH_REPLICAS_AFTER_APPEND), the leader role's value, the internal topics, the error
    codes, the ACL operation and resource type of a write, the log's count of
    offset moves (``pykfk.log.log.OFFSET_MOVES``) and the producer state's record of a
    batch (``pykfk.log.producer_state.BatchMetadata``); and the handler's Python for
    what ``handle`` leaves to it: ``slow_factory(ctx, request, pending)`` (the object
    that answers the partitions the lane does not take, see ``_walk``),
    ``finish(ctx, request, body, slow, pending)`` (the answer when anything is left to
    do), ``may_write_transactions(ctx, transactional_id)`` and
    ``refuse_transactional(ctx, request)`` (the answer to a request whose transactional
    batches may not be written)."""
    global _KafkaError, _LEADER, _INTERNAL, _NONE, _NOT_ENOUGH_AFTER, _WRITE, _TOPIC, _OFFSET_MOVES, _BatchMetadata
    global _slow_factory, _finish, _may_write_transactions, _refuse_transactional
    _KafkaError = kafka_error
    _LEADER = leader_role
    _INTERNAL = internal_topics
    _NONE = none_code
    _NOT_ENOUGH_AFTER = not_enough_after_code
    _WRITE = write_operation
    _TOPIC = topic_resource
    _OFFSET_MOVES = offset_moves
    if not (issubclass(batch_metadata, tuple) and batch_metadata._fields == (
            "first_seq", "last_seq", "first_offset", "last_offset", "timestamp")):
        raise TypeError("batch_metadata must be the named tuple of a kept batch")
    _BatchMetadata = batch_metadata
    _ANSWER["error_code"] = none_code
    _slow_factory = slow_factory
    _finish = finish
    _may_write_transactions = may_write_transactions
    _refuse_transactional = refuse_transactional


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


cdef struct _Counts:
    # What a topic's appends by the lane add to its metrics, added once per topic.
    int64_t bytes_in
    int64_t messages_in


cdef object _append(object partition_leader, object records, int acks, long long min_isr, object timeout_ms, bint single,
                    list pending, _Counts *counts):
    """One partition appended by the lane: its answer's dict, or None (nothing done) when
    the append is not the lane's. Raises what the Python path raises for the same data.

    The lane's appends: one magic-2 batch, not a control batch, to a log whose settings
    leave appends plain and with no roll or flush due; the batch carries no producer
    id, or is an idempotent producer's (not transactional) next batch: same epoch as the
    producer's last batch here, sequence following on from its last without wrapping.
    That is the one case Kafka's producer-state rules admit without further question (no
    duplicate can match it: every kept batch of the epoch ends at or before the last
    sequence); every other producer batch (a producer new to the partition, a retry, a
    gap, a new or older epoch) is the Python path's, which applies all the rules
    (``pykfk.log.producer_state``)."""
    global _appended
    cdef const uint8_t *p
    cdef Py_ssize_t size = 0
    cdef int64_t max_timestamp, first_offset, last_offset, next_offset, hw, producer_id
    cdef int32_t batch_length, count, first_seq = -1, last_seq = -1
    cdef int producer_epoch = -1
    cdef LogState plog
    cdef LeaderState leader = <LeaderState>partition_leader
    if type(records) is not memoryview:
        return None
    # (read in place: the records are the request's, held by ``records`` meanwhile)
    p = _view_bytes(records, &size)
    if p == NULL or size < _HEADER_SIZE or p[_MAGIC_AT] != 2:
        return None
    batch_length = _be32(p + _BATCH_LENGTH_AT)
    if <Py_ssize_t>batch_length + 12 != size:  # exactly one batch (more, or a bad length: Python)
        return None
    if p[_ATTRIBUTES_AT + 1] & (_ATTR_CONTROL | _ATTR_TRANSACTIONAL):
        return None  # control batches (refused) and transactional batches: Python
    count = _be32(p + _LAST_OFFSET_DELTA_AT) + 1
    max_timestamp = _be64(p + _MAX_TIMESTAMP_AT)
    producer_id = _be64(p + _PRODUCER_ID_AT)
    if producer_id >= 0:
        producer_epoch = <int16_t>((p[_PRODUCER_EPOCH_AT] << 8) | p[_PRODUCER_EPOCH_AT + 1])
        first_seq = _be32(p + _BASE_SEQUENCE_AT)
        if first_seq < 0 or count <= 0 or first_seq > _INT32_MAX - (count - 1):
            return None  # no sequence (refused), or one that wraps: Python
        last_seq = first_seq + (count - 1)
    if count <= 0 or max_timestamp < 0:
        return None
    lane = leader.append_lane
    plog = <LogState>lane[0]
    if not plog._plain_appends or not plog._writable:
        return None
    if acks == -1 and len(leader.isr) < min_isr:
        return None  # NOT_ENOUGH_REPLICAS, by the Python path
    lock = plog._lock
    _lock_acquire(lock)
    try:
        first_offset = plog._log_end_offset
        last_offset = first_offset + count - 1
        next_offset = last_offset + 1
        if next_offset - plog._recovery_point >= plog._flush_messages:
            return None  # a flush is due: Python
        if size > plog._segment_bytes:
            return None
        segment = plog._active
        if segment is None:
            return None
        state = plog.producer_state
        entry = None
        if producer_id >= 0:
            entry = (<dict>state.producers).get(producer_id)
            if entry is None or entry.producer_epoch != producer_epoch:
                return None
            batches = entry.batches
            if not batches or (<tuple>batches[-1])[1] + 1 != first_seq:
                return None
        headers = _validate_and_assign(records, first_offset, leader.leader_epoch, plog._max_message_bytes,
                                      decompress=plog.validate_compressed, max_batches=1 if single else 0)
        if len(headers) != 1 or headers[0].next_offset != next_offset:
            raise AssertionError("validated batch disagrees with its header")
        try:
            # Leaves no partial batch behind when the write fails.
            if segment.append_active(records, plog._segment_bytes, plog._max_segment_ms) < 0:
                return None  # a roll (or the segment's age) decides: Python, which validates again
        except (OSError, ValueError) as exc:
            plog._append_failed(segment, exc, True)
        plog._log_end_offset = next_offset
        _OFFSET_MOVES.count += 1
        if next_offset > state.map_end_offset:
            state.map_end_offset = next_offset
        if entry is not None:
            # ProducerStateManager.commit_append of the batch (same epoch: nothing to clear).
            # (made as its named tuple class makes it, without the Python frame of its __new__)
            batches.append(_tuple_new(_BatchMetadata, (first_seq, last_seq, first_offset, last_offset, max_timestamp)))
            if max_timestamp > entry.last_timestamp:
                entry.last_timestamp = max_timestamp
        log_start = plog._log_start_offset
    finally:
        _lock_release(lock)
    _appended += 1
    _plog, _manager, topic, partition, _stats, hw_waiters, end_waiters = lane
    counts.bytes_in += size
    counts.messages_in += count
    if leader.remote:
        leader.maybe_advance_high_watermark()
    else:  # no follower: the high watermark moved with the log end offset
        # Always told, waiters or not: a fetch about to park checks the count of appends
        # made since its first read (AppendWaiters.notified).
        hw_waiters.notify(topic, partition)
    end_waiters.notify(topic, partition)
    result = _ANSWER.copy()  # (a copy of a dict of these keys costs less than a new one)
    result["index"] = partition
    result["base_offset"] = first_offset
    result["log_start_offset"] = log_start
    if acks != -1:
        return result
    hw = plog._log_end_offset if plog._high_watermark is None else plog._high_watermark
    if hw > last_offset:
        if len(leader.isr) < min_isr:
            raise _KafkaError(_NOT_ENOUGH_AFTER, f"{topic}-{partition}: NOT_ENOUGH_REPLICAS_AFTER_APPEND after the append")
        return result
    pending.append((result, leader.wait_for_replication(next_offset, max(timeout_ms, 0) / 1000)))
    return result


def handle(ctx, request):
    """The Produce handler (``pykfk.server.handlers.produce``): the response body now,
    None (acks=0), or a coroutine giving the body when something must be waited for.
    ``request`` is ``wire.decode_produce``'s tuple. When every partition took the lane,
    no quota applies and nothing waits for replication, the body is answered here;
    otherwise the handler's ``finish`` completes it."""
    transactional_id, acks, timeout_ms, topics = <tuple>request
    if _transactional_batches(<list>topics) and not _may_write_transactions(ctx, transactional_id):
        return _refuse_transactional(ctx, request)
    broker = ctx.broker
    cdef list pending = []
    cdef list slow_box = [None]
    responses = _walk(ctx, broker, transactional_id, acks, timeout_ms, <list>topics, request, pending, slow_box)
    slow = slow_box[0]
    body = _BODY.copy()
    body["responses"] = responses
    if slow is not None or pending or broker.quotas.active:
        return _finish(ctx, request, body, slow, pending)
    if acks == 0:
        return None  # every partition appended: nothing to answer
    return body


def encode_response(int version, int32_t correlation_id, body):
    """The Produce answer's frame as the request lane sends it: one chunk
    (``wire.encode_produce_response``)."""
    return [_encode(version, correlation_id, body)]


cdef bint _transactional_batches(list topics) except -1:
    """Whether a partition's data starts with a whole transactional batch: the request
    needs a transactional id its principal may write (Kafka's KafkaApis: it looks at the
    first batch of each partition's records, RequestUtils.flags)."""
    cdef const uint8_t *p
    cdef Py_ssize_t size = 0
    for _topic, partitions in topics:
        for _index, records in <list>partitions:
            if type(records) is not memoryview:
                continue
            p = _view_bytes(records, &size)
            if (p != NULL and size >= _HEADER_SIZE and p[_MAGIC_AT] == 2
                    and <Py_ssize_t>_be32(p + _BATCH_LENGTH_AT) + 12 <= size
                    and p[_ATTRIBUTES_AT + 1] & _ATTR_TRANSACTIONAL):
                return True
    return False


cdef list _walk(ctx, broker, transactional_id, acks, timeout_ms, list topics, request, list pending, list slow_box):
    """The request's partitions answered: the topics' response entries. ``slow_box[0]``
    stays None when every partition took the compiled lane, else holds the object
    ``slow_factory(ctx, request, pending)`` made for the first that did not, whose
    ``partition(name, index, records, results, denied, internal)`` and
    ``refused(name, index, exc, results)`` (any exception an append raised) did the
    Python path's work (it holds what the handler finishes: deferred transactional
    partitions, leader hints). ``pending``: the acks=all waits, ``(entry, coroutine)``."""
    global _handed_over
    replicas = broker.replica_manager
    cdef int version = ctx.api_version
    cdef bint single = version >= 3
    cdef bint plain = transactional_id is None and type(acks) is int and -1 <= acks <= 1
    cdef bint fast, denied, internal
    cdef int acks_c = acks if plain else 0
    cdef long long min_isr = 0
    cdef _Counts added
    authorizer = broker.authorizer
    cdef dict leaders = replicas.partitions
    cdef list responses = []
    cdef dict by_topic = None  # made at a request's second topic (most name one)
    cdef list results = None
    cdef dict entry
    last_name = None
    slow = None
    for topic, partitions in topics:
        if type(topic) is str:
            name = topic
        else:
            if slow is None:
                slow = slow_box[0] = _slow_factory(ctx, request, pending)
            name = slow.named(topic, partitions, responses)
            if name is None:
                continue
        if last_name is None or name != last_name:
            found = None if by_topic is None else by_topic.get(name)
            if found is None:
                found = []
                if last_name is not None:
                    if by_topic is None:
                        by_topic = {last_name: results}
                    by_topic[name] = found
                entry = _TOPIC_ENTRY.copy()
                entry["name"] = name
                entry["partition_responses"] = found
                if version >= 13:
                    entry["topic_id"] = topic
                responses.append(entry)
            results = found
            last_name = name
        denied = authorizer is not None and not ctx.allowed(_WRITE, _TOPIC, name)
        internal = name in _INTERNAL
        fast = plain and not denied and not internal
        if fast and acks_c == -1:
            min_isr = replicas.min_insync_replicas_for(name)  # once per topic of the request
        added.bytes_in = added.messages_in = 0
        stats = None
        try:
            for index, records in <list>partitions:
                if fast:
                    leader = leaders.get((name, index))
                    if isinstance(leader, LeaderState) and (<LeaderState>leader).role == _LEADER:
                        stats = (<LeaderState>leader).append_lane[4]
                        try:
                            result = _append(leader, records, acks_c, min_isr, timeout_ms, single, pending, &added)
                        except Exception as exc:  # answered as the Python path answers it
                            if slow is None:
                                slow = slow_box[0] = _slow_factory(ctx, request, pending)
                            slow.refused(name, index, exc, results)
                            continue
                        if result is not None:
                            results.append(result)
                            continue
                _handed_over += 1
                if slow is None:
                    slow = slow_box[0] = _slow_factory(ctx, request, pending)
                slow.partition(name, index, records, results, denied, internal)
        finally:
            if added.bytes_in:  # the topic's metrics, once for its partitions the lane appended
                stats.bytes_in += added.bytes_in
                stats.messages_in += added.messages_in
    return responses
