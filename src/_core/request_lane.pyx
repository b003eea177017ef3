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
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.stdint cimport int16_t, int32_t, uint8_t, uint16_t, uint32_t

from time import perf_counter

DEF KEYS = 128  # api keys looked up in the table (Kafka's highest is below 100)


cdef class Slot:
    """One request in flight on a connection: its work (a task, its chunks once answered,
    None for no answer, or a Failed), its context (None for bytes that are no request),
    the request bytes it holds, and when its times are sampled, its ``perf_counter``
    readings: the read that completed its frame, the start and end of its handler's
    first step, its answer."""

    cdef public object work
    cdef public object ctx
    cdef public Py_ssize_t frame_size
    cdef public bint timed
    cdef public double received
    cdef public double started
    cdef public double handled
    cdef public double ready

    def __init__(self, work, ctx, Py_ssize_t frame_size):
        self.work = work
        self.ctx = ctx
        self.frame_size = frame_size

    cpdef release(self):
        """Give back the segment regions its answer sends from."""
        cdef object ctx = self.ctx
        if ctx is not None:
            pinned = ctx.pinned
            if pinned:
                for region in pinned:
                    region.release()
                pinned.clear()

    def release_when_done(self, _future):
        self.release()


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


cdef class Lane:
    """One broker's compiled request path (one per Dispatcher, shared by its
    connections)."""

    cdef object dispatcher
    cdef object broker
    cdef object registry
    cdef object counts
    cdef object quotas
    cdef int version_slots
    cdef list table
    cdef object close_error
    cdef object failed
    cdef object ctx_type
    cdef object ctx_new
    cdef object header
    cdef object gather
    cdef object region_type
    cdef object ensure_future
    cdef object partial
    cdef object log
    cdef object framing_encode
    cdef object cut_frames
    cdef Py_ssize_t gather_max
    cdef Py_ssize_t held_limit

    def __init__(self, dispatcher, handlers, specs, int version_slots, close_error, failed, ctx_type,
                 decode_request_header, gather, Py_ssize_t gather_max, region_type, ensure_future, partial,
                 log, framing_encode, cut_frames, Py_ssize_t held_limit):
        self.dispatcher = dispatcher
        self.broker = dispatcher.broker
        self.registry = dispatcher.registry
        self.counts = dispatcher.request_stats.counts
        self.quotas = getattr(dispatcher.broker, "quotas", None)
        self.version_slots = version_slots
        self.close_error = close_error
        self.failed = failed
        self.ctx_type = ctx_type
        self.ctx_new = ctx_type.__new__
        self.header = decode_request_header
        self.gather = gather
        self.gather_max = gather_max
        self.region_type = region_type
        self.ensure_future = ensure_future
        self.partial = partial
        self.log = log
        self.framing_encode = framing_encode
        self.cut_frames = cut_frames
        self.held_limit = held_limit
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
        quotas = self.quotas
        if session.gated or (quotas is not None and quotas.times_requests) or type(frame) is not bytearray:
            return self.dispatcher.prepare(frame, session)
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
        if entry is None:
            # Not in the table: the dispatcher says why (unknown key, or one above KEYS).
            return self.dispatcher.prepare(frame, session)
        if version < entry.min_version or version > entry.max_version:
            return self.dispatcher.prepare(frame, session)
        self.counts[api_key * self.version_slots + version] += 1
        view = memoryview(frame)
        try:
            client_id, body_offset = self.header(view, version >= entry.flexible_from)
            if entry.decode is not None:
                request = entry.decode(view, body_offset, version)
            else:
                request = entry.spec_decode(view, body_offset, version)
        except Exception as exc:  # ProtocolError, or whatever a hostile frame provokes
            raise self.close_error(f"malformed {entry.name} v{version} request: {exc}") from None
        ctx = self.ctx_new(self.ctx_type)
        ctx.broker = self.broker
        ctx.registry = self.registry
        ctx.api_key = api_key
        ctx.api_version = version
        ctx.correlation_id = correlation_id
        ctx.client_id = client_id
        ctx.session = session
        ctx.pinned = []
        ctx.own_time = 0.0
        try:
            body = entry.handle(ctx, request)
            if body is None:
                return None, ctx
            if isinstance(body, dict):
                if entry.encode is not None:
                    return entry.encode(version, correlation_id, body), ctx
                return self.framing_encode(api_key, version, correlation_id, body), ctx
            return self.dispatcher._run(entry.handler, ctx, body), ctx  # answered later
        except Exception as exc:  # reported when this request's turn comes
            return self.failed(exc), ctx

    def deliver(self, conn, list frames):
        """``Connection._deliver`` for each of ``frames`` (requests whose times are not
        sampled): each request's answer, or its task, joins the response queue."""
        cdef Slot slot
        cdef Py_ssize_t held = 0
        slots = conn._slots
        session = conn.session
        failed = self.failed
        for frame in frames:
            if conn._closed or conn._draining:
                break
            try:
                work, ctx = self.prepare(frame, session)
            except self.close_error as exc:
                self.log.info("closing connection from %s: %s", conn.peer, exc)
                conn.abort()
                break
            except Exception:
                self.log.exception("closing connection from %s: unexpected error decoding a request", conn.peer)
                conn.abort()
                break
            slot = Slot.__new__(Slot)
            slot.ctx = ctx
            if work is None or type(work) is list or type(work) is failed:
                slot.work = work
            else:
                task = self.ensure_future(work)
                slot.work = task
                slot.frame_size = PyByteArray_GET_SIZE(frame) if type(frame) is bytearray else len(frame)
                conn._held_bytes += slot.frame_size
                task.add_done_callback(self.partial(self.request_done, conn, slot))
            slots.append(slot)

    def send_ready(self, conn):
        """``Connection._send_ready_now``: the ready answers at the head of the queue in
        one ``send`` (the writer is idle); the rest is the writer's."""
        sock = conn._sock
        if sock is None:
            return
        slots = conn._slots
        cdef list data = []
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
                    data.append(gathered)
                else:
                    data.extend(chunks)
            slots.popleft()
            if slot.ctx is not None:
                slot.release()
            if slot.timed:
                if timed is None:
                    timed = []
                timed.append(slot)
        if not data:
            if timed:  # no answer to send (acks=0)
                conn.server.request_stats.observe_sent(timed, conn._handled_at, conn._handled_at)
            return
        payload = data[0] if len(data) == 1 else b"".join(data)
        try:
            sent = sock.send(payload)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self.log.info("closing connection from %s: %s", conn.peer, exc)
            conn.abort()
            return
        if timed:
            conn.server.request_stats.observe_sent(timed, conn._handled_at, perf_counter())
        if sent < len(payload):
            slots.appendleft(Slot([memoryview(payload)[sent:]], None, 0))

    def read(self, conn):
        """``Connection._parse_frames`` and ``_after_frames`` after a read whose requests
        are not timed: every complete frame in the read buffer cut and delivered, then
        the ready answers sent (or left for the end of the loop turn). A partial frame
        or a size to refuse is left to ``Connection._parse_frames``."""
        server = conn.server
        cdef Py_ssize_t start = conn._start
        cdef Py_ssize_t end = conn._end
        limit = server.max_request_bytes if conn.session.authenticated else server.max_prelogin_bytes
        frames, start = self.cut_frames(conn._buf, start, end, limit)
        if frames:
            conn._start = start
            self.deliver(conn, frames)
            if conn._closed:
                return
        if end - start >= 4:
            conn._parse_frames()  # what is left: a partial frame, or a size to refuse
            if conn._closed:
                return
        elif start == end:
            conn._start = conn._end = 0
        else:
            conn._start = start
        slots = conn._slots
        if slots and conn._writer_idle:
            self.send_or_defer(conn)
        if (conn._reading_paused or conn._draining or conn._held_bytes > self.held_limit
                or len(slots) >= server.max_in_flight):
            conn._update_reading()

    def request_done(self, conn, Slot slot, _task=None):
        """``Connection._request_done``: a request's task ended."""
        if slot.timed:
            slot.ready = perf_counter()
        conn._held_bytes -= slot.frame_size
        slot.frame_size = 0
        slots = conn._slots
        if slots and slots[0] is slot and conn._writer_idle and not conn._closed:
            self.send_or_defer(conn)
        conn._update_reading()

    cpdef send_or_defer(self, conn):
        """``Connection._send_or_defer``: send the ready answers now, or at the end of
        this loop turn when the connection already sent in it."""
        server = conn.server
        turn = server.turn
        if conn._sent_turn == turn and conn.loop.is_running():
            if not conn._deferred:
                conn._deferred = True
                server._deferred.append(conn)
            return
        conn._sent_turn = turn
        if not server._turn_marked:
            server._turn_marked = True
            conn.loop.call_soon(self.end_turn, server)
        self.send_ready(conn)
        # Wake the idle writer for what the send left: a failure, a large file region,
        # the unsent tail (Connection._wake_writer).
        waiter = conn._slot_added
        if waiter is None or waiter.done():
            return
        slots = conn._slots
        if slots:
            work = (<Slot>slots[0]).work
            if (type(work) is list or work is None or type(work) is self.failed or work.done()):
                waiter.set_result(None)
        elif conn._draining:
            waiter.set_result(None)

    def end_turn(self, server):
        """``KafkaServer.end_turn``: the next callback after a turn in which a connection
        sent at once; a new turn, and what the connections left for its end is sent."""
        server._turn_marked = False
        server.turn += 1
        deferred = server._deferred
        if deferred:
            server._deferred = []
            for conn in deferred:
                conn._deferred = False
            for conn in deferred:
                if conn._slots and conn._writer_idle and not conn._closed:
                    try:
                        self.send_ready(conn)
                        conn._wake_writer()
                        if conn._reading_paused:
                            # Paused for a full queue (max in flight, held bytes): the
                            # answers just sent may have made room, and a paused
                            # connection has no read of its own to look again.
                            conn._update_reading()
                    except Exception:  # one connection's failure is not the others'
                        self.log.exception("closing connection from %s: sending its answers failed", conn.peer)
                        conn.abort()
