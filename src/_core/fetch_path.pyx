# cython: language_level=3
"""The Fetch handler's work per partition, compiled: the read limits (high watermark,
last stable offset for read_committed), the byte budget of the response, the segment
read through the log, the pinned FileRegion the answer sends with sendfile (record bytes
are never copied; down-converted for v0-3), the aborted transactions, and the answer's
dicts as the response encoder takes them.

The handler itself is here too (``handle``, ``Fetch``): the first read, and for a long
poll its parking as a loop Future in the waiters (``Waiters``, the fetch purgatory),
re-read and answered by the wake-up, with no coroutine or task.

The segment read itself (``read_log``: whole batches from the one holding the offset,
the tailing reader's remembered position) is here too, and ``pykfk.log.log.Log.read``
is its Python face: one owner of the read rules for both.

A partition this broker leads, asked by a consumer (or a follower) at the current
leader epoch, whose log holds no open or unreplicated transaction, is read with no
Python call: its role, leader epoch, offsets and segment list are C fields of its
compiled bases (``LeaderState``, ``LogState``) or slots, read as attributes. Everything
else (errors, a follower's reassignment throttle, a rack-aware consumer, the last stable
offset of a log with transactions in flight) goes through the replica manager's Python
(``log_for_fetch``, ``Log.last_stable_offset``), so their rules stay in one place;
``counts`` says how many partitions took each way. A follower's fetch still makes
Python calls: its position report per partition (``Partition.follower_fetched``), and
once per request the check that no reassignment throttle is set
(``leader_throttle.limited``).

The core imports nothing of the broker: the handler hands in the exception its reads
raise (``KafkaError``, with a ``code``), the error codes, the leader role, the
rack-aware replica selector (``configure``), and the Python pieces of the handler:
sessions, topic ids, ACLs (``configure_handler``).
"""

from libc.stdint cimport int64_t
from time import perf_counter
from uuid import UUID
from weakref import ref

from pykfk._core.records import to_legacy
from pykfk._core.regions import FileRegion
from pykfk._core.wire import encode_fetch_response

cdef object _ZERO_UUID = UUID(int=0)

cdef object _KafkaError = None
cdef object _preferred = None
cdef object _AUTHORIZATION_FAILED = 29
cdef object _OUT_OF_RANGE = 1
cdef object _NONE = 0
cdef object _LEADER = None
cdef long long INT32_MAX = 2**31 - 1
cdef int64_t INT64_MAX = 2**63 - 1
# Partitions read with no Python call, and through the replica manager's Python.
cdef long long _compiled = 0
cdef long long _handed_over = 0


def configure(kafka_error, preferred_read_replica, none_code, authorization_failed_code, out_of_range_code,
              leader_role):
    """The broker's pieces the core must not import: the exception class whose ``code``
    a failed read answers, ``preferred_read_replica(ctx, topic, partition, rack)`` (KIP-392),
    the error codes (ErrorCode members, so answers hold the same values as before) and
    the value of a leader's ``role``."""
    global _KafkaError, _preferred, _NONE, _AUTHORIZATION_FAILED, _OUT_OF_RANGE, _LEADER
    _KafkaError = kafka_error
    _preferred = preferred_read_replica
    _NONE = none_code
    _AUTHORIZATION_FAILED = authorization_failed_code
    _OUT_OF_RANGE = out_of_range_code
    _LEADER = leader_role
    _ANSWER["error_code"] = none_code


def counts():
    """``(compiled, handed_over)``: partition reads whose limits came from C fields with
    no Python call, and those that went through the replica manager's Python, since the
    process started."""
    return _compiled, _handed_over


# -- the segment read (Log.read's work) -----------------------------------------------------

cdef struct _Bounds:
    # What the read saw of the log when it started: the offsets a Fetch answer reports.
    int64_t log_start
    int64_t log_end
    int64_t high_watermark
    bint out_of_range


cdef inline Py_ssize_t _floor_index(list bases, int64_t offset) except -2:
    """The index of the last of the ascending ``bases`` at or below ``offset`` (-1: none)."""
    cdef Py_ssize_t low = 0, high = len(bases), middle
    while low < high:
        middle = (low + high) >> 1
        if offset < <int64_t>bases[middle]:
            high = middle
        else:
            low = middle + 1
    return low - 1


cdef inline void _remember_end(object view, object seg, int64_t end) except *:
    """Remembers ``end`` as where the next read starts when it is the segment's end: the
    offset there is next_offset, read between two reads of the size, so that an append in
    between (another thread) leaves nothing remembered."""
    next_offset = seg.next_offset
    if seg.size == end:
        view.fetch_hint = (seg, next_offset, end)


cdef object _read_once(object log, int64_t offset, int64_t max_bytes, int64_t max_offset, bint min_one_message,
                       _Bounds *bounds):
    cdef int64_t log_start, log_end, limit, start, size, base, max_position, position
    cdef Py_ssize_t i, count
    view = log._view
    log_start = log._log_start_offset
    log_end = log._log_end_offset
    high_watermark = log._high_watermark
    bounds.log_start = log_start
    bounds.log_end = log_end
    bounds.high_watermark = log_end if high_watermark is None else high_watermark
    bounds.out_of_range = False
    cdef list bases = view.base_offsets
    if offset < log_start or offset > log_end or not bases or offset < <int64_t>bases[0]:
        bounds.out_of_range = True
        return None
    limit = log_end if max_offset > log_end else max_offset
    if offset >= limit or (max_bytes <= 0 and not min_one_message):
        return None
    if max_bytes < 0:
        max_bytes = 0
    hint = view.fetch_hint
    if hint is not None and <int64_t>(<tuple>hint)[1] == offset:
        # A tailing reader asking where its last read ended: no index or header read
        # when everything from there to the limit fits (the segment's end is a batch
        # boundary; size is read before next_offset, so a concurrent append can only
        # make the check stricter).
        seg = (<tuple>hint)[0]
        start = (<tuple>hint)[2]
        size = seg.size
        if limit >= <int64_t>seg.next_offset and start < size and max_bytes >= size - start:
            _remember_end(view, seg, size)
            return FileRegion(seg.fileno(), start, size - start, seg)
    cdef list segments = view.segments
    i = _floor_index(bases, offset)
    count = len(segments)
    while i < count:
        seg = segments[i]
        base = seg.base_offset
        if base >= limit:
            break
        max_position = seg.position_of(limit) if limit < <int64_t>seg.next_offset else -1
        found = seg.read(offset if offset > base else base, max_bytes, max_position)
        if found is not None and <int64_t>(<tuple>found)[1] > 0:
            position = (<tuple>found)[0]
            size = (<tuple>found)[1]
            if not min_one_message and size > max_bytes:
                size = max_bytes  # clients drop a partial trailing batch
            elif position + size == max_position:
                view.fetch_hint = (seg, limit, max_position)  # the read ended at the limit
            else:
                _remember_end(view, seg, position + size)
            return FileRegion(seg.fileno(), position, size, seg)
        i += 1
    return None


cdef object _read_log(object log, int64_t offset, int64_t max_bytes, int64_t max_offset, bint min_one_message,
                      _Bounds *bounds):
    """The region of whole batches from the one holding ``offset`` (None: nothing to
    return, or ``bounds.out_of_range``); see ``read_log``."""
    try:
        return _read_once(log, offset, max_bytes, max_offset, min_one_message, bounds)
    except ValueError:
        # A segment of the list this read started from was closed meanwhile (deleted
        # with file.delete.delay.ms 0); the current list answers correctly.
        return _read_once(log, offset, max_bytes, max_offset, min_one_message, bounds)


def read_log(log, int64_t offset, int64_t max_bytes, max_offset, bint min_one_message):
    """A log's read (``pykfk.log.log.Log.read``, whose fields it reads: offsets, segment
    list, the tailing reader's remembered position): whole batches from the one holding
    ``offset``, up to ``max_bytes`` (at least one batch when ``min_one_message``) and
    below ``max_offset`` (None: the log end), as ``(region or None, log start offset, log
    end offset, high watermark)``; None when ``offset`` is outside [log start, log end]."""
    cdef _Bounds bounds
    region = _read_log(log, offset, max_bytes, INT64_MAX if max_offset is None else max_offset, min_one_message,
                       &bounds)
    if bounds.out_of_range:
        return None
    return region, bounds.log_start, bounds.log_end, bounds.high_watermark


# A partition's answer as the response encoder takes it; each answer fills in a copy (a
# copy of a small dict is one allocation and a copy of its table: no insertions).
cdef dict _ANSWER = {"partition_index": 0, "error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
                     "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
                     "records": b""}


cdef dict _error(object partition, object code):
    cdef dict answer = _ANSWER.copy()
    answer["partition_index"] = partition
    answer["error_code"] = code
    return answer


def partition_error(partition, code):
    """A partition's answer carrying only ``code``."""
    return _error(partition, code)


cdef object _failed(object replicas, object topic, object partition, object code):
    stats = replicas.topic_stats.for_topic(topic)
    stats.failed_fetch_requests += 1
    return _error(partition, code)


cdef object _owned(object ctx, object region, int version):
    """The records an answer sends: the region pinned (its descriptor held until the
    answer is sent) or None when its segment closed since the read; v0-3: the batches
    down-converted to the message sets those versions read."""
    if version < 4:
        return to_legacy(region.read(), 0 if version < 2 else 1)
    try:
        pinned = region.pinned()
    except ValueError:
        return None  # the segment closed since the read (deleted): the next fetch rereads
    ctx.pinned.append(pinned)
    return pinned


cdef inline bint _throttled(object replicas, int replica_id) except -1:
    """A follower's fetch while a reassignment throttle is set (``leader.replication.
    throttled.rate``): its partitions' limits go through ``log_for_fetch``. Asked once
    per request (the rate is a setting, the same for every partition)."""
    return replica_id >= 0 and replicas.leader_throttle.limited


cdef tuple _read_partition(object ctx, object replicas, int version, object topic, object part, int replica_id,
                           bint throttled, long long remaining, bint first, bint first_pass, bint read_committed,
                           object client_rack):
    global _compiled, _handed_over
    cdef object partition = part.partition
    cdef long long fetch_offset = part.fetch_offset
    cdef bint error = False
    cdef long long limit, size = 0, high_watermark, max_offset, log_start, last_stable
    cdef int64_t epoch
    cdef _Bounds bounds
    # The common case, whose limits need no Python call: this broker leads the partition,
    # the fetch names no other leader epoch, the log holds no transaction the last stable
    # offset waits for, and for a follower no reassignment throttle applies.
    plog = None
    found = None
    cdef dict partitions
    if client_rack is None and not throttled:
        partitions = replicas.partitions
        found = partitions.get((topic, partition))
    if found is not None and found.role == _LEADER:
        epoch = part.current_leader_epoch
        if epoch < 0 or epoch == <int64_t>found.leader_epoch:  # else FENCED / UNKNOWN_LEADER_EPOCH
            plog = found.log
            state = plog.producer_state
            if state.ongoing or state.unreplicated:
                plog = None
    if plog is not None:
        _compiled += 1
        if replica_id >= 0 and first_pass:
            found.follower_fetched(replica_id, fetch_offset)  # may move the high watermark
        max_offset = plog._log_end_offset
        value = plog._high_watermark
        high_watermark = max_offset if value is None else value
        if replica_id < 0:
            max_offset = high_watermark
        last_stable = high_watermark  # no transaction in flight
    else:
        # Everything else: the replica manager's and the log's Python decide.
        _handed_over += 1
        try:
            plog, read_limit = replicas.log_for_fetch(
                topic, partition, replica_id, fetch_offset, part.current_leader_epoch,
                report_position=first_pass, consumer_on_follower=version >= 11)
        except _KafkaError as exc:
            return _failed(replicas, topic, partition, exc.code), 0, True
        max_offset = read_limit
        # A consumer's read limit is the high watermark already; a follower's the end.
        high_watermark = max_offset if replica_id < 0 else plog.high_watermark
        if client_rack is not None:
            preferred = _preferred(ctx, topic, partition, client_rack)
            if preferred >= 0:  # KIP-392: read from the replica in the client's rack
                answer = _error(partition, _NONE)
                answer["high_watermark"] = high_watermark
                answer["last_stable_offset"] = plog.last_stable_offset
                answer["log_start_offset"] = plog.log_start_offset
                answer["preferred_read_replica"] = preferred
                return answer, 0, error
        last_stable = plog.last_stable_offset
    if replica_id >= 0 and part.high_watermark < high_watermark:
        error = True  # KIP-1166: tell the follower now (v18+; older: never)
    if read_committed:
        max_offset = last_stable
    limit = part.partition_max_bytes
    if limit > remaining:
        limit = remaining
    records = b""
    region = None
    if fetch_offset == max_offset and plog._log_start_offset <= max_offset:
        # Nothing new (a caught-up follower or consumer): no segment lookup.
        log_start = plog._log_start_offset
    elif limit > 0 or first:
        # Only the first partition with data may exceed the limits (one whole batch);
        # later ones are cut, and clients drop a partial last batch.
        try:
            region = _read_log(plog, fetch_offset, limit if limit > 0 else 0, max_offset, first, &bounds)
        except _KafkaError as exc:
            return _failed(replicas, topic, partition, exc.code), 0, True
        if bounds.out_of_range:
            return _failed(replicas, topic, partition, _OUT_OF_RANGE), 0, True
        log_start = bounds.log_start
    else:
        log_start = plog._log_start_offset
        # Past the read limit but not the log end (a new leader's high watermark
        # still catching up): nothing to read, not out of range.
        if not log_start <= fetch_offset <= plog._log_end_offset:
            return _failed(replicas, topic, partition, _OUT_OF_RANGE), 0, True
    if region is not None:
        size = region.size
        if size > 0:
            records = _owned(ctx, region, version)
        else:
            size = 0
    aborted = None
    # (the aborted transactions' list read as the field it is: no Python call when empty)
    if read_committed and region is not None and plog.aborted_txns._entries:
        aborted = [{"producer_id": txn.producer_id, "first_offset": txn.first_offset}
                   for txn in plog.aborted_transactions(fetch_offset, max_offset)] or None
    cdef dict done = _ANSWER.copy()
    done["partition_index"] = partition
    done["high_watermark"] = high_watermark
    done["last_stable_offset"] = last_stable
    done["log_start_offset"] = log_start
    if aborted is not None:
        done["aborted_transactions"] = aborted
    if size:
        done["records"] = records
    return done, size, error


def read_partition(ctx, topic, part, int replica_id, long long remaining, bint first, bint first_pass,
                   bint read_committed, client_rack):
    """One partition's answer, the record bytes it holds, and whether it must be sent at
    once (an error, or a v18 follower behind the high watermark). ``remaining``: the
    response's byte budget left; ``first``: no partition before it has data (so its first
    batch is sent whole whatever the limits)."""
    replicas = ctx.broker.replica_manager
    return _read_partition(ctx, replicas, ctx.api_version, topic, part, replica_id, _throttled(replicas, replica_id),
                           remaining, first, first_pass, read_committed, client_rack)


def read_all(ctx, topics, int replica_id, long long max_bytes, bint first_pass, denied, bint read_committed,
             client_rack, known_as):
    """One pass over the requested partitions: (responses, bytes available, answer now:
    an error, or a v18 follower behind the leader's high watermark). Each topic's answer
    carries its ``topic_id`` from ``known_as`` when given (Fetch v13+)."""
    cdef int version = ctx.api_version
    cdef long long remaining = max_bytes if version >= 3 else INT32_MAX
    cdef long long total = 0, size
    cdef bint error = False
    cdef list responses = []
    cdef list partitions
    cdef dict entry
    replicas = ctx.broker.replica_manager
    cdef bint throttled = _throttled(replicas, replica_id)
    for topic in topics:
        name = topic.topic
        if denied and name in denied:
            partitions = [_error(part.partition, _AUTHORIZATION_FAILED) for part in topic.partitions]
            error = True
        else:
            partitions = []
            for part in topic.partitions:
                answer, size, failed = _read_partition(ctx, replicas, version, name, part, replica_id, throttled,
                                                       remaining, total == 0, first_pass, read_committed, client_rack)
                partitions.append(answer)
                if size:
                    total += size
                    remaining -= size
                if failed:
                    error = True
        entry = {"topic": name, "partitions": partitions}
        if known_as is not None:
            entry["topic_id"] = known_as.get(name, _ZERO_UUID)
        responses.append(entry)
    return responses, total, error


def count_bytes_out(stats, list responses, bint replication):
    """Per topic, the record bytes of the answer (once per partition, never per record).
    ``stats``: the broker's ``BrokerTopicStats``, whose dict of topics is read directly
    (``for_topic`` only makes a topic's stats the first time)."""
    cdef long long sent
    cdef dict known = stats._topics
    for topic in responses:
        sent = 0
        for part in topic["partitions"]:
            records = part["records"]
            if records:
                # Records the reads put in an answer: a FileRegion or bytes (never a list).
                sent += records.size if type(records) is FileRegion else len(records)
        if sent:
            name = topic["topic"]
            topic_stats = known.get(name)
            if topic_stats is None:
                topic_stats = stats.for_topic(name)
            if replication:
                topic_stats.replication_bytes_out += sent
            else:
                topic_stats.bytes_out += sent


def session_answer(partitions, list responses, bint incremental):
    """An answer of an incremental fetch session (KIP-227): remembers in each partition's
    session state (``partitions``: (topic, partition) -> state with ``sent_high_watermark``,
    ``sent_last_stable_offset``, ``sent_log_start_offset``) what its answer told the
    client; an ``incremental`` answer keeps only the partitions with news: records, an
    error, or offsets other than those last sent. Topics left without partitions go."""
    cdef list out = []
    cdef list kept
    cdef bint news
    cdef dict entry
    for topic in responses:
        name = topic["topic"]
        kept = []
        for answer in topic["partitions"]:
            state = partitions.get((name, answer["partition_index"]))
            if state is None:
                news = True
            else:
                high_watermark = answer["high_watermark"]
                last_stable = answer["last_stable_offset"]
                log_start = answer["log_start_offset"]
                news = (answer["error_code"] != 0 or bool(answer["records"])
                        or high_watermark != state.sent_high_watermark
                        or last_stable != state.sent_last_stable_offset
                        or log_start != state.sent_log_start_offset)
                state.sent_high_watermark = high_watermark
                state.sent_last_stable_offset = last_stable
                state.sent_log_start_offset = log_start
            if news or not incremental:
                kept.append(answer)
        if kept:
            entry = dict(topic)
            entry["partitions"] = kept
            out.append(entry)
    return out


# -- long polling: the waiters, and a fetch parked without a task ---------------------------

cdef object _get_running_loop = None
cdef object _topic_names = None
cdef object _UNKNOWN_TOPIC_ID = 100
cdef object _names_of = None  # the _topic_names(store) of the last store asked
cdef object _names_store = None  # a weak reference to that store
cdef object _open_session = None
cdef object _denied_topics = None
cdef object _encode_generic = None
cdef object _answer_later = None
cdef object _charge_key = None
cdef object _EMPTY = frozenset()


def configure_handler(get_running_loop, topic_names, open_session, denied_topics, encode_generic, answer_later,
                      consumer_byte_rate, unknown_topic_id_code):
    """The handler's Python pieces (``pykfk.server.handlers.fetch``): the running loop's
    getter, a store's topic names by id for v13+ (``topic_names(store)``: an object whose
    ``by_int`` dict maps the ids it resolved, as 128-bit ints, to names, and whose
    ``name_of(topic_id)`` resolves one and remembers it), the fetch-session step, the ACL check, the
    generic response encoder, the coroutine that awaits a parked fetch's body (the path
    of request-time quotas), and the byte-rate quota key."""
    global _get_running_loop, _topic_names, _open_session, _denied_topics, _encode_generic, _answer_later
    global _charge_key, _UNKNOWN_TOPIC_ID
    _get_running_loop = get_running_loop
    _topic_names = topic_names
    _UNKNOWN_TOPIC_ID = unknown_topic_id_code
    _open_session = open_session
    _denied_topics = denied_topics
    _encode_generic = encode_generic
    _answer_later = answer_later
    _charge_key = consumer_byte_rate


cpdef object encode_answer(int version, object correlation_id, object body):
    """A Fetch response frame as chunks: the compiled encoder, or the generic one for a
    body with a field the compiled encoder leaves out (tagged fields)."""
    chunks = encode_fetch_response(version, correlation_id, body)
    if chunks is None:
        chunks = _encode_generic(version, correlation_id, body)
    return chunks


cdef class Waiters:
    """Partition -> fetches parked on it (a minimal fetch purgatory, Kafka's
    DelayedFetch); loop-affine. ``notify`` after an append, ``wake_all`` at shutdown.
    A waiter is a ``Fetch`` (compiled) or any object with ``notify(key)`` and ``wake()``
    (``pykfk.cluster.waiters.Parked``)."""

    cdef public dict _waiting
    cdef public bint _closed
    # Appends notified so far: a change between a fetch's first read and its park says
    # an append it could not hear may have landed on its partitions.
    cdef public long long notified

    def __init__(self):
        self._waiting = {}
        self._closed = False
        self.notified = 0

    cpdef notify(self, topic, partition):
        """Called after an append to (topic, partition)."""
        self.notified += 1
        if not self._waiting:
            return  # nobody long-polls (every produce-only run): no key to build
        key = (topic, partition)
        parked = self._waiting.get(key)
        if parked:
            for waiter in parked:
                if type(waiter) is Fetch:
                    (<Fetch>waiter)._heard(key)
                else:
                    waiter.notify(key)

    def wake_all(self):
        """Shutdown: every parked fetch answers now with what it has."""
        self._closed = True
        for parked in list(self._waiting.values()):
            for waiter in list(parked):
                if type(waiter) is Fetch:
                    (<Fetch>waiter)._wake_now()
                else:
                    waiter.wake()

    cdef void _register(self, list keys, object waiter):
        cdef dict waiting = self._waiting
        for key in keys:
            found = waiting.get(key)
            if found is None:
                waiting[key] = {waiter}
            else:
                (<set>found).add(waiter)

    cdef void _unregister(self, list keys, object waiter):
        cdef dict waiting = self._waiting
        for key in keys:
            found = waiting.get(key)
            if found is not None:
                (<set>found).discard(waiter)
                if not found:
                    del waiting[key]


cdef object _waiters_manager = None  # a weak reference to the replica manager last asked
cdef Waiters _consumer_waiters = None
cdef Waiters _follower_waiters = None


cdef Waiters _waiters_of(object replicas, int replica_id):
    """``replicas.fetch_waiters(replica_id)``, asked once per replica manager (its two
    purgatories are made with it and never replaced)."""
    global _waiters_manager, _consumer_waiters, _follower_waiters
    if _waiters_manager is None or _waiters_manager() is not replicas:
        _consumer_waiters = replicas.fetch_waiters(-1)
        _follower_waiters = replicas.fetch_waiters(0)
        _waiters_manager = ref(replicas)
    return _follower_waiters if replica_id >= 0 else _consumer_waiters


cdef void _release_region(object ctx, object region):
    """Ends the hold of a region read before (a partition read again after a wake-up)."""
    cdef list pinned = ctx.pinned
    cdef Py_ssize_t index
    for index in range(len(pinned)):
        if pinned[index] is region:
            del pinned[index]
            region.release()
            return


cdef class Fetch:
    """One Fetch request: the first read of every partition, and when fewer than
    ``min_bytes`` are there, its parking until an append to one of its partitions,
    ``max_wait_ms``, a lost leadership or shutdown. A parked fetch is a loop Future
    (what the connection's request queue waits on, in place of a task) plus its
    registration in the waiters and one timer; a wake-up re-reads only the partitions
    appended to (the answers of the others stand, their regions pinned), and when the
    fetch is done encodes the answer and completes the Future with its chunks. A Future
    cancelled (the connection closed) unregisters, stops its timer and releases its
    pinned regions."""

    cdef object ctx
    cdef object broker
    cdef object request
    cdef object topics
    cdef object session
    cdef object known_as
    cdef object unknown
    cdef object denied
    cdef object client_rack
    cdef int version
    cdef int replica_id
    cdef bint read_committed
    cdef long long max_bytes
    cdef long long min_bytes
    cdef list responses
    cdef long long available
    # Parked: the waiters, the keys registered there, each key's place in the answers,
    # the partitions appended to since the last re-read, the Future, its timer, the
    # pending wake-up and the done callback that hears a cancel.
    cdef Waiters waiters
    cdef list keys
    cdef dict where
    cdef set woken
    cdef object loop
    cdef object future
    cdef object timer
    cdef object wake_handle
    cdef object on_done
    cdef bint expired
    cdef bint encode
    cdef bint timed

    cdef object _first(self):
        """The first read of every partition: the body when the fetch is done at once,
        else the parked fetch's Future (or, with request-time quotas, a coroutine)."""
        cdef object request = self.request
        cdef object broker = self.broker
        self.waiters = _waiters_of(broker.replica_manager, self.replica_id)
        cdef long long notified_before = self.waiters.notified
        responses, available, error = read_all(self.ctx, self.topics, self.replica_id, self.max_bytes, True,
                                               self.denied, self.read_committed, self.client_rack, self.known_as)
        self.responses = responses
        self.available = available
        if self.available >= self.min_bytes or error or request.max_wait_ms <= 0 or broker.stopping \
                or self.waiters._closed:
            return self._body()
        return self._park(notified_before)

    cdef object _park(self, long long notified_before):
        cdef dict where = {}
        cdef list keys = []
        cdef list answers
        cdef Py_ssize_t index
        for topic, answer in zip(self.topics, self.responses):
            answers = answer["partitions"]
            name = topic.topic
            index = 0
            for part in topic.partitions:
                key = (name, part.partition)
                where[key] = (answers, index, part)
                keys.append(key)
                index += 1
        self.where = where
        self.keys = keys
        self.woken = set()
        broker = self.broker
        quotas = broker.quotas
        self.encode = not quotas.times_requests
        stats = getattr(broker, "request_stats", None)
        self.timed = self.encode and stats is not None and stats.timing
        loop = self.loop = _get_running_loop()
        future = self.future = loop.create_future()
        self.timer = loop.call_at(loop.time() + self.request.max_wait_ms / 1000.0, self._expire)
        self.waiters._register(keys, self)
        self.on_done = self._done_callback
        future.add_done_callback(self.on_done)
        if self.waiters.notified != notified_before:
            # Appends landed between the first read and this park, unheard: read every
            # partition again once rather than wait out max_wait_ms past data.
            self.woken.update(keys)
            self.wake_handle = loop.call_soon(self._wake)
        if self.encode:
            return future
        return _answer_later(future)

    cdef void _heard(self, key):
        """An append to ``key`` (or a leadership change there): re-read it on the next
        turn of the loop, with whatever else the same turn appends."""
        self.woken.add(key)
        if self.wake_handle is None and self.future is not None:
            self.wake_handle = self.loop.call_soon(self._wake)

    cdef void _wake_now(self):
        """Shutdown: answer on the next turn with what the fetch has."""
        self.expired = True
        if self.wake_handle is None and self.future is not None:
            self.wake_handle = self.loop.call_soon(self._wake)

    def _expire(self):
        self.timer = None
        self.expired = True
        if self.wake_handle is not None:
            self.wake_handle.cancel()
        self._wake()

    def _wake(self):
        self.wake_handle = None
        future = self.future
        if future is None or future.done():
            return
        cdef double started = perf_counter() if self.timed else 0.0
        try:
            body = self._reread()
            if body is None:
                return
            self._unpark()
            if self.encode:
                body = encode_answer(self.version, self.ctx.correlation_id, body)
        except Exception as exc:  # the request fails as its task would have
            self._unpark()
            future.set_exception(exc)
            return
        if self.timed:
            self.ctx.own_time += perf_counter() - started
        future.set_result(body)

    cdef object _reread(self):
        """Read again the partitions appended to since the last re-read (their old
        answers' regions released); the body when the fetch is done, else None."""
        cdef object ctx = self.ctx
        cdef bint error = False, throttled
        cdef long long old_size, others, budget, size
        cdef list answers
        cdef dict old
        woken = self.woken
        if woken:
            self.woken = set()
            replicas = self.broker.replica_manager
            throttled = _throttled(replicas, self.replica_id)
            for key in woken:
                found = self.where.get(key)
                if found is None:
                    continue
                answers, index, part = found
                old = answers[index]
                records = old["records"]
                old_size = 0
                if records:
                    # Records the reads put in an answer: a FileRegion or bytes (never a list).
                    if type(records) is FileRegion:
                        old_size = records.size
                        _release_region(ctx, records)
                    else:
                        old_size = len(records)
                others = self.available - old_size
                budget = self.max_bytes - others if self.version >= 3 else INT32_MAX
                answer, size, failed = _read_partition(ctx, replicas, self.version, key[0], part, self.replica_id,
                                                       throttled, budget, others == 0, False, self.read_committed,
                                                       self.client_rack)
                answers[index] = answer
                self.available = others + size
                if failed:
                    error = True
        if self.available >= self.min_bytes or error or self.expired or self.broker.stopping \
                or self.waiters._closed:
            return self._body()
        return None

    cdef void _unpark(self):
        """Out of the waiters, the timer stopped, the Future's cancel hook removed."""
        if self.keys is not None:
            self.waiters._unregister(self.keys, self)
            self.keys = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.wake_handle is not None:
            self.wake_handle.cancel()
            self.wake_handle = None
        if self.on_done is not None:
            self.future.remove_done_callback(self.on_done)
            self.on_done = None

    def _done_callback(self, future):
        """The Future ended by anyone but the fetch itself: a cancel when the connection
        closed. The fetch leaves the waiters and gives back the regions it pinned."""
        self.on_done = None
        self._unpark()
        self.future = None
        pinned = self.ctx.pinned
        if pinned:
            for region in pinned:
                region.release()
            pinned.clear()

    cdef dict _body(self):
        ctx, request, broker = self.ctx, self.request, self.broker
        responses = self.responses
        cdef long long available = self.available
        throttle_ms = 0
        if self.replica_id < 0 and broker.quotas.active:
            throttle_ms = ctx.charge(_charge_key, available)
        if available:
            count_bytes_out(broker.replica_manager.topic_stats, responses, self.replica_id >= 0)
        session = self.session
        if session is not None:
            responses = session_answer(session.partitions, responses, request.session_id != 0)
        if self.unknown:
            responses = [*responses, *self.unknown]
        return {"throttle_time_ms": throttle_ms, "error_code": _NONE,
                "session_id": session.session_id if session is not None else 0,
                "responses": responses}


cdef object _names_for(object store):
    global _names_of, _names_store
    if _names_store is not None and _names_store() is store:
        return _names_of
    names = _topic_names(store)
    _names_of, _names_store = names, ref(store)
    return names


cdef tuple _named_by_id(object store, object request):
    """Fetch v13+ names topics by id: each requested (and forgotten) topic gets its name;
    topics whose id no topic has are taken out of the request and answered
    UNKNOWN_TOPIC_ID. Returns the id of each name and those answers."""
    names = _names_for(store)
    cdef dict by_int = names.by_int
    cdef dict known_as = {}
    cdef list unknown = []
    cdef list kept = []
    for topic in request.topics:
        topic_id = topic.topic_id
        name = by_int.get(topic_id.int)
        if name is None:
            name = names.name_of(topic_id)
            if name is None:
                unknown.append({"topic": "", "topic_id": topic_id, "partitions": [
                    _error(part.partition, _UNKNOWN_TOPIC_ID) for part in topic.partitions]})
                continue
        topic.topic = name
        known_as[name] = topic_id
        kept.append(topic)
    request.topics = kept
    for forgotten in request.forgotten_topics_data:
        topic_id = forgotten.topic_id
        name = by_int.get(topic_id.int)
        if name is None:
            name = names.name_of(topic_id)
        forgotten.topic = name or ""
    return known_as, unknown


def handle(ctx, request):
    """Fetch (key 1), compiled: the answer at once when the first read has it (data, an
    error, no wait asked), else the parked fetch's Future, completed with the encoded
    answer (``Fetch``); with request-time quotas a coroutine giving the body."""
    cdef int version = ctx.api_version
    broker = ctx.broker
    if version >= 15:  # the replica id moved into the tagged replica state
        state = request.replica_state
        request.replica_id = state.replica_id if state is not None else -1
    cdef int replica_id = request.replica_id
    known_as = None
    unknown = None
    if version >= 13:
        known_as, unknown = _named_by_id(broker.metadata, request)
    topics = request.topics
    session = None
    if version >= 7 and (request.session_id != 0 or request.session_epoch != -1):
        found = _open_session(ctx, request, known_as, unknown)
        if type(found) is dict:  # an error: the client starts over with a full fetch
            return found
        session, topics, known_as, unknown = found
    cdef Fetch fetch = Fetch.__new__(Fetch)
    fetch.ctx = ctx
    fetch.broker = broker
    fetch.request = request
    fetch.topics = topics
    fetch.session = session
    fetch.known_as = known_as
    fetch.unknown = unknown
    fetch.version = version
    fetch.replica_id = replica_id
    fetch.max_bytes = request.max_bytes
    fetch.min_bytes = request.min_bytes
    fetch.read_committed = version >= 4 and replica_id < 0 and request.isolation_level == 1
    fetch.denied = _denied_topics(ctx, replica_id, topics) if broker.authorizer is not None else _EMPTY
    if version >= 11 and replica_id < 0:
        rack = request.rack_id
        if rack and broker.config["replica.selector.class"]:  # a consumer naming its rack
            fetch.client_rack = rack
    return fetch._first()
