# cython: language_level=3
"""The per-request path of a connection, compiled: request header, API lookup, version
check, the handler's call and its answer's place in the response queue, and the send of
the answers ready at the head of that queue (one ``send`` for all of them).

``pykfk.server.connection`` and ``pykfk.server.dispatch`` keep the rules; this module
runs them without an interpreter frame per request. What it does not take (a SASL
session before or between logins, request-time quotas, requests whose times are sampled
for the request metrics) goes through ``Dispatcher.prepare`` and ``Connection._deliver``
as before. The broker's classes come in through ``Lane(...)``: the core imports nothing
of the server.

The state this path reads and writes per request lives in C fields of three base
classes the server's Python classes derive from: ``ConnState`` (``Connection``),
``ServerState`` (``KafkaServer``) and ``RequestCore`` (``RequestContext``). The Python
code uses the same attribute names as before; here they are struct reads and writes.
"""

cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, PyByteArray_GET_SIZE
from libc.stdint cimport int16_t, int32_t, uint8_t, uint16_t, uint32_t

from asyncio import Future
from time import perf_counter
from types import CoroutineType

DEF KEYS = 128  # api keys looked up in the table (Kafka's highest is below 100)


cdef extern from "Python.h":
    """
    /* ``cls.__new__(cls)`` for a subclass of RequestCore, by its type's tp_new (no
       method lookup and call of ``__new__``). */
    static PyObject *__pk_new_context(PyObject *cls) {
        static PyObject *no_args = NULL;
        if (no_args == NULL && (no_args = PyTuple_New(0)) == NULL)
            return NULL;
        return ((PyTypeObject *)cls)->tp_new((PyTypeObject *)cls, no_args, NULL);
    }
    """
    object _new_context "__pk_new_context"(object cls)


cdef class ServerState:
    """What the lane reads of a listener (``KafkaServer``) per request: its limits, its
    lane, and the turn state of direct sends (``Lane.end_turn``)."""

    cdef public object lane
    cdef public object request_stats
    cdef public Py_ssize_t max_request_bytes
    cdef public Py_ssize_t max_prelogin_bytes
    cdef public Py_ssize_t max_in_flight
    cdef public Py_ssize_t turn
    cdef public bint _turn_marked
    cdef public list _deferred


cdef class ConnState:
    """What the lane reads and writes of a connection (``Connection``) per request: the
    read buffer's bounds, the response queue, the writer's state, flow control."""

    cdef public ServerState server
    cdef public object loop
    cdef public object session
    cdef public object peer
    cdef public bytearray _buf
    cdef public object _buf_view  # memoryview of _buf
    cdef public Py_ssize_t _large_size  # >= 0 while a large frame is read into its own storage
    cdef public bint _timing  # requests may be timed (a sample of reads)
    cdef public bint _timed_read  # this read's requests are timed
    cdef public double last_active
    cdef public Py_ssize_t _start
    cdef public Py_ssize_t _end
    cdef public object _slots
    cdef public object _slot_added
    cdef public object _sock
    cdef public Py_ssize_t _held_bytes
    cdef public Py_ssize_t _sent_turn
    cdef public double _throttled_until
    cdef public double _handled_at
    cdef public bint _closed
    cdef public bint _draining
    cdef public bint _reading_paused
    cdef public bint _writer_idle
    cdef public bint _deferred

    def get_buffer(self, Py_ssize_t sizehint):
        """``asyncio.BufferedProtocol.get_buffer``: the free end of the read buffer."""
        if self._large_size >= 0:
            return self._large_buffer()
        if self._end == PyByteArray_GET_SIZE(self._buf):
            self._compact()
        return self._buf_view[self._end:]

    def buffer_updated(self, Py_ssize_t nbytes):
        """``asyncio.BufferedProtocol.buffer_updated``: a read of requests that are not
        timed goes to the lane (``Lane.read``); the rest to ``Connection._read_slow``."""
        self.last_active = self.loop.time()
        if self._timing or self._large_size >= 0:
            self._read_slow(nbytes)
            return
        self._end += nbytes
        lane = self.server.lane
        if type(lane) is Lane:
            (<Lane>lane)._read(self)
        else:
            lane.read(self)


cdef class RequestCore:
    """The fields of a request's context (``pykfk.server.dispatch.RequestContext``, which
    adds its methods). ``pinned`` is made on first use: most answers pin nothing."""

    cdef public object broker
    cdef public object registry
    cdef public object session
    cdef public object client_id
    cdef public int api_key
    cdef public int api_version
    cdef public int32_t correlation_id
    cdef public double own_time
    cdef list _pinned

    @property
    def pinned(self):
        if self._pinned is None:
            self._pinned = []
        return self._pinned

    @pinned.setter
    def pinned(self, list value):
        self._pinned = value


@cython.freelist(64)
cdef class Slot:
    """One request in flight on a connection: its work (a task, its chunks once answered,
    None for no answer, or a Failed), its context (None for bytes that are no request),
    the request bytes it holds, and when its times are sampled, its ``perf_counter``
    readings: the read that completed its frame, the start and end of its handler's
    first step, its answer. Called as its task's done callback (``Lane.request_done``)."""

    cdef public object work
    cdef public object ctx
    cdef public Py_ssize_t frame_size
    cdef public bint timed
    cdef public double received
    cdef public double started
    cdef public double handled
    cdef public double ready
    cdef ConnState conn  # while its task runs: the connection and lane it reports to
    cdef Lane lane

    def __init__(self, work, ctx, Py_ssize_t frame_size):
        self.work = work
        self.ctx = ctx
        self.frame_size = frame_size

    cpdef release(self):
        """Give back the segment regions its answer sends from."""
        cdef object ctx = self.ctx
        if ctx is None:
            return
        if isinstance(ctx, RequestCore):
            pinned = (<RequestCore>ctx)._pinned
        else:
            pinned = ctx.pinned
        if pinned:
            for region in pinned:
                region.release()
            pinned.clear()

    def release_when_done(self, _future):
        self.release()

    def __call__(self, _task):
        cdef ConnState conn = self.conn
        cdef Lane lane = self.lane
        if conn is not None and lane is not None:
            self.conn = None
            self.lane = None
            lane._request_done(conn, self)


cdef class _Entry:
    cdef object handler
    cdef object name
    cdef int min_version
    cdef int max_version
    cdef int flexible_from
    cdef object handle
    cdef object decode
    cdef object encode
    cdef object spec_decode


async def _answer(Lane lane, _Entry entry, RequestCore ctx, pending):
    """``Dispatcher._run`` without request metrics, compiled: the response chunks of the
    body ``pending`` gives (None for no response)."""
    body = await pending
    if body is None:
        return None
    if entry.encode is not None:
        return entry.encode(ctx.api_version, ctx.correlation_id, body)
    return lane.framing_encode(ctx.api_key, ctx.api_version, ctx.correlation_id, body)


_probe = _answer(None, None, None, None)
_COMPILED_COROUTINE = type(_probe)  # what ``_answer`` gives
_probe.close()
del _probe


cdef inline bint _reading_to_change(ConnState conn, Py_ssize_t held_limit):
    """Whether ``Connection._update_reading`` would pause or resume reading."""
    busy = (conn._draining or len(conn._slots) >= conn.server.max_in_flight
            or conn._held_bytes > held_limit or conn._throttled_until > 0)
    return busy != conn._reading_paused


cdef class Lane:
    """One broker's compiled request path (one per Dispatcher, shared by its
    connections)."""

    cdef object dispatcher
    cdef object broker
    cdef object registry
    cdef list counts
    cdef object quotas
    cdef int version_slots
    cdef list table
    cdef object close_error
    cdef object failed
    cdef object ctx_type
    cdef object header
    cdef object gather
    cdef object region_type
    cdef object ensure_future
    cdef object log
    cdef object framing_encode
    cdef object cut_frames
    cdef object run
    cdef bint timing
    cdef object end_turn_callback  # self.end_turn, made once
    cdef Py_ssize_t gather_max
    cdef Py_ssize_t held_limit

    def __init__(self, dispatcher, handlers, specs, int version_slots, close_error, failed, ctx_type,
                 decode_request_header, gather, Py_ssize_t gather_max, region_type, ensure_future,
                 log, framing_encode, cut_frames, Py_ssize_t held_limit):
        if not issubclass(ctx_type, RequestCore):
            raise TypeError(f"{ctx_type!r} does not derive from RequestCore")
        self.dispatcher = dispatcher
        self.broker = dispatcher.broker
        self.registry = dispatcher.registry
        self.counts = dispatcher.request_stats.counts
        self.quotas = getattr(dispatcher.broker, "quotas", None)
        self.version_slots = version_slots
        self.close_error = close_error
        self.failed = failed
        self.ctx_type = ctx_type
        self.header = decode_request_header
        self.gather = gather
        self.gather_max = gather_max
        self.region_type = region_type
        self.ensure_future = ensure_future
        self.log = log
        self.framing_encode = framing_encode
        self.cut_frames = cut_frames
        self.run = dispatcher._run
        self.timing = dispatcher._timing
        self.held_limit = held_limit
        self.end_turn_callback = self.end_turn
        self.table = [None] * KEYS
        cdef _Entry entry
        for api_key, handler in handlers.items():
            if not 0 <= api_key < KEYS:
                continue
            entry = _Entry()
            entry.handler = handler
            entry.name = handler.name
            entry.min_version = handler.min_version
            entry.max_version = handler.max_version
            entry.flexible_from = handler.flexible_from
            entry.handle = handler.handle
            entry.decode = handler.decode
            entry.encode = handler.encode
            entry.spec_decode = specs[api_key].decode_request
            self.table[api_key] = entry

    def prepare(self, frame, session):
        """``Dispatcher.prepare``: ``(work, ctx)``, or CloseConnection raised."""
        cdef Slot slot = Slot.__new__(Slot)
        self._prepare(slot, frame, session)
        return slot.work, slot.ctx

    cdef int _prepare(self, Slot slot, frame, session) except -1:
        """``prepare``, its ``(work, ctx)`` put in ``slot``."""
        quotas = self.quotas
        if session.gated or (quotas is not None and quotas.times_requests) or type(frame) is not bytearray:
            slot.work, slot.ctx = self.dispatcher.prepare(frame, session)
            return 0
        cdef Py_ssize_t size = PyByteArray_GET_SIZE(frame)
        if size < 8:
            raise self.close_error(f"request of {size} bytes is shorter than a header")
        cdef const uint8_t* p = <const uint8_t*>PyByteArray_AS_STRING(frame)
        cdef int api_key = <int16_t>((<uint16_t>p[0] << 8) | p[1])
        cdef int version = <int16_t>((<uint16_t>p[2] << 8) | p[3])
        cdef int32_t correlation_id = <int32_t>((<uint32_t>p[4] << 24) | (<uint32_t>p[5] << 16)
                                                | (<uint32_t>p[6] << 8) | <uint32_t>p[7])
        cdef _Entry entry = None
        if 0 <= api_key < KEYS:
            entry = <_Entry>self.table[api_key]
        if entry is None or version < entry.min_version or version > entry.max_version:
            # Not in the table (unknown key, or one above KEYS), or a version it does
            # not serve: the dispatcher says why.
            slot.work, slot.ctx = self.dispatcher.prepare(frame, session)
            return 0
        cdef Py_ssize_t count_index = api_key * self.version_slots + version
        self.counts[count_index] = self.counts[count_index] + 1
        view = memoryview(frame)
        try:
            client_id, body_offset = self.header(view, version >= entry.flexible_from)
            if entry.decode is not None:
                request = entry.decode(view, body_offset, version)
            else:
                request = entry.spec_decode(view, body_offset, version)
        except Exception as exc:  # ProtocolError, or whatever a hostile frame provokes
            raise self.close_error(f"malformed {entry.name} v{version} request: {exc}") from None
        cdef RequestCore ctx = <RequestCore>_new_context(self.ctx_type)  # (a RequestCore subclass, as __init__ checked)
        ctx.broker = self.broker
        ctx.registry = self.registry
        ctx.api_key = api_key
        ctx.api_version = version
        ctx.correlation_id = correlation_id
        ctx.client_id = client_id
        ctx.session = session
        slot.ctx = ctx
        try:
            body = entry.handle(ctx, request)
            if body is None:
                slot.work = None
            elif isinstance(body, dict):
                if entry.encode is not None:
                    slot.work = entry.encode(version, correlation_id, body)
                else:
                    slot.work = self.framing_encode(api_key, version, correlation_id, body)
            elif isinstance(body, Future):
                slot.work = body  # completed with the encoded answer (a parked fetch)
            else:
                # Answered later: its task encodes the body its handler gives (with
                # request metrics on, the dispatcher's _run also times its steps).
                slot.work = self.run(entry.handler, ctx, body) if self.timing else _answer(self, entry, ctx, body)
        except Exception as exc:  # reported when this request's turn comes
            slot.work = self.failed(exc)
        return 0

    cdef bint _deliver(self, ConnState conn, frame) except -1:
        """One request of ``conn`` into its response queue; False when the connection
        was closed."""
        cdef Slot slot = Slot.__new__(Slot)
        try:
            self._prepare(slot, frame, conn.session)
        except self.close_error as exc:
            self.log.info("closing connection from %s: %s", conn.peer, exc)
            conn.abort()
            return False
        except Exception:
            self.log.exception("closing connection from %s: unexpected error decoding a request", conn.peer)
            conn.abort()
            return False
        work = slot.work
        if not (work is None or type(work) is list or type(work) is self.failed):
            if type(work) is _COMPILED_COROUTINE or type(work) is CoroutineType:
                task = conn.loop.create_task(work)
            elif isinstance(work, Future):
                task = work
            else:
                task = self.ensure_future(work)
            slot.work = task
            slot.frame_size = PyByteArray_GET_SIZE(frame) if type(frame) is bytearray else len(frame)
            conn._held_bytes += slot.frame_size
            slot.conn = conn
            slot.lane = self
            task.add_done_callback(slot)
        conn._slots.append(slot)
        return True

    def deliver(self, ConnState conn, list frames):
        """``Connection._deliver`` for each of ``frames`` (requests whose times are not
        sampled): each request's answer, or its task, joins the response queue."""
        for frame in frames:
            if conn._closed or conn._draining:
                break
            if not self._deliver(conn, frame):
                break

    def send_ready(self, ConnState conn):
        """``Connection._send_ready_now``: the ready answers at the head of the queue in
        one ``send`` (the writer is idle); the rest is the writer's."""
        self._send_ready(conn)

    cdef int _send_ready(self, ConnState conn) except -1:
        sock = conn._sock
        if sock is None:
            return 0
        slots = conn._slots
        cdef object data = None  # the first answer's chunk, or a list of them all
        cdef list timed = None
        cdef Slot slot
        failed = self.failed
        region_type = self.region_type
        while slots:
            slot = <Slot>slots[0]
            work = slot.work
            if type(work) is list:
                chunks = work
            elif work is None:
                chunks = None
            elif type(work) is failed:
                break  # the writer reports it in turn
            else:
                if not work.done() or work.cancelled() or work.exception() is not None:
                    break
                chunks = work.result()
            if chunks:
                has_region = False
                for chunk in chunks:
                    if type(chunk) is region_type:
                        has_region = True
                        break
                if has_region:
                    try:
                        gathered = self.gather(chunks, self.gather_max)
                    except (OSError, EOFError):  # the writer meets it again and reports it
                        break
                    if gathered is None:
                        break  # too large to copy: sendfile, by the writer
                    chunks = [gathered]
                if data is None and len(chunks) == 1:
                    data = chunks[0]
                else:
                    if type(data) is not list:
                        data = [] if data is None else [data]
                    data.extend(chunks)
            slots.popleft()
            if slot.ctx is not None:
                slot.release()
            if slot.timed:
                if timed is None:
                    timed = []
                timed.append(slot)
        if data is None:
            if timed:  # no answer to send (acks=0)
                conn.server.request_stats.observe_sent(timed, conn._handled_at, conn._handled_at)
            return 0
        if type(data) is list:
            payload = b"".join(data)
        else:
            payload = data
        try:
            sent = sock.send(payload)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.log.info("closing connection from %s: %s", conn.peer, exc)
            conn.abort()
            return 0
        if timed:
            conn.server.request_stats.observe_sent(timed, conn._handled_at, perf_counter())
        if sent < len(payload):
            slots.appendleft(Slot([memoryview(payload)[sent:]], None, 0))
        return 0

    def read(self, ConnState conn):
        """``Connection._parse_frames`` and ``_after_frames`` after a read whose requests
        are not timed: every complete frame in the read buffer cut and delivered, then
        the ready answers sent (or left for the end of the loop turn). A partial frame
        or a size to refuse is left to ``Connection._parse_frames``."""
        self._read(conn)

    cdef int _read(self, ConnState conn) except -1:
        cdef ServerState server = conn.server
        cdef Py_ssize_t start = conn._start
        cdef Py_ssize_t end = conn._end
        cdef Py_ssize_t limit = (server.max_request_bytes if conn.session.authenticated
                                 else server.max_prelogin_bytes)
        cdef bytearray buf = conn._buf
        cdef const uint8_t* p
        cdef int32_t size
        if end > PyByteArray_GET_SIZE(buf) or start < 0 or start > end:
            raise ValueError(f"bytes {start}-{end} outside a buffer of {PyByteArray_GET_SIZE(buf)}")
        # Each complete frame within the limit, cut (a copy: a request outlives the read
        # buffer) and delivered in turn.
        while end - start >= 4:
            p = <const uint8_t*>PyByteArray_AS_STRING(buf) + start
            size = <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
                             | (<uint32_t>p[2] << 8) | <uint32_t>p[3])
            if size < 0 or size > limit or end - start - 4 < size:
                break
            if conn._draining:
                break  # Connection._parse_frames drops what is left
            frame = PyByteArray_FromStringAndSize(<const char*>(p + 4), size)
            start += 4 + size
            conn._start = start
            if not self._deliver(conn, frame) or conn._closed:
                return 0
        if end - start >= 4:
            conn._parse_frames()  # what is left: a partial frame, or a size to refuse
            if conn._closed:
                return 0
        elif start == end:
            conn._start = conn._end = 0
        else:
            conn._start = start
        if conn._writer_idle and conn._slots:
            self._send_or_defer(conn)
        if _reading_to_change(conn, self.held_limit):
            conn._update_reading()
        return 0

    def request_done(self, ConnState conn, Slot slot, _task=None):
        """``Connection._request_done``: a request's task ended."""
        slot.conn = None
        slot.lane = None
        self._request_done(conn, slot)

    cdef int _request_done(self, ConnState conn, Slot slot) except -1:
        if slot.timed:
            slot.ready = perf_counter()
        conn._held_bytes -= slot.frame_size
        slot.frame_size = 0
        slots = conn._slots
        if conn._writer_idle and not conn._closed and slots and slots[0] is slot:
            self._send_or_defer(conn)
        if not conn._closed and _reading_to_change(conn, self.held_limit):
            conn._update_reading()
        return 0

    def send_or_defer(self, ConnState conn):
        """``Connection._send_or_defer``: send the ready answers now, or at the end of
        this loop turn when the connection already sent in it."""
        self._send_or_defer(conn)

    cdef int _send_or_defer(self, ConnState conn) except -1:
        cdef ServerState server = conn.server
        if conn._sent_turn == server.turn and conn.loop.is_running():
            if not conn._deferred:
                conn._deferred = True
                server._deferred.append(conn)
            return 0
        conn._sent_turn = server.turn
        if not server._turn_marked:
            server._turn_marked = True
            conn.loop.call_soon(self.end_turn_callback, server)
        self._send_ready(conn)
        self._wake_writer(conn)
        return 0

    cdef int _wake_writer(self, ConnState conn) except -1:
        """``Connection._wake_writer``: wake the idle writer for what a send left (a
        failure, a large file region, the unsent tail), or a draining connection with
        nothing left to answer."""
        waiter = conn._slot_added
        if waiter is None or waiter.done():
            return 0
        slots = conn._slots
        if slots:
            work = (<Slot>slots[0]).work
            if (type(work) is list or work is None or type(work) is self.failed or work.done()):
                waiter.set_result(None)
        elif conn._draining:
            waiter.set_result(None)
        return 0

    def end_turn(self, ServerState server):
        """``KafkaServer.end_turn``: the next callback after a turn in which a connection
        sent at once; a new turn, and what the connections left for its end is sent."""
        cdef ConnState conn
        server._turn_marked = False
        server.turn += 1
        cdef list deferred = server._deferred
        if deferred:
            server._deferred = []
            for item in deferred:
                (<ConnState>item)._deferred = False
            for item in deferred:
                conn = <ConnState>item
                if conn._slots and conn._writer_idle and not conn._closed:
                    try:
                        self._send_ready(conn)
                        self._wake_writer(conn)
                        if conn._reading_paused:
                            # Paused for a full queue (max in flight, held bytes): the
                            # answers just sent may have made room, and a paused
                            # connection has no read of its own to look again.
                            conn._update_reading()
                    except Exception:  # one connection's failure is not the others'
                        self.log.exception("closing connection from %s: sending its answers failed", conn.peer)
                        conn.abort()
