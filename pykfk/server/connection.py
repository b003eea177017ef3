"""Listener and connections: size-prefixed Kafka frames in, ordered responses out.

Reading uses ``asyncio.BufferedProtocol``: small frames are cut from one reusable 64 KiB
buffer; a larger frame gets its own storage, grown as its bytes arrive, so a client that
announces a big frame and sends nothing holds no memory. The 4-byte length prefix is
checked against ``socket.request.max.bytes`` before anything is allocated (Kafka's
``NetworkReceive``): an over-limit or negative prefix closes the connection.

Requests on one connection are handled concurrently but answered strictly in request
order. A handler that answers at once (Produce when nothing waits for replication) costs no task: its
response is queued ready, and when nothing older is outstanding the responses of every
frame of one socket read go out in one ``send`` before the read callback returns. A
handler that must wait (long-poll Fetch, acks=all) runs in its own task; when it ends
with nothing older outstanding, its answer and the ready ones behind it go out the same
way, from the task's done callback (no turn of the writer task). A writer task takes what
these direct sends leave: a socket that is full, record bytes above ``GATHER_BYTES_MAX``
(sendfile), a failed handler, TLS. Reading pauses while ``queued.max.requests``
responses are outstanding or too many request bytes are held, which bounds memory per
connection.

Writing bypasses the transport: the writer owns a duplicate of the socket's fd, sends
header bytes with ``sendmsg`` and record bytes (FileRegion chunks) with
``pykfk._core.sendfile.sendfile`` straight from the segment file, and waits for
writability with ``loop.add_writer`` on that duplicate when the socket buffer is full.
A response of at most ``GATHER_BYTES_MAX`` bytes goes out whole in one send instead, its
record bytes read into the buffer (``pykfk._core.sendfile.gather``).
Over TLS (and for transports without a real socket) responses go through
``transport.write``, record bytes read with ``os.pread`` in 256 KiB chunks as the
transport drains: encryption needs the bytes in memory, a whole response never is.

Each connection has a ``Session`` (``session.py``): its listener, principal and SASL
login. A client over a quota is muted: its socket is not read until the throttle time
its answer announced has passed (KIP-219).

With the metrics endpoint on (``RequestStats.timing``), the requests of at most one socket
read per ``TIMED_READ_INTERVAL_S`` (broker-wide: every read of a quiet broker, a sample of
a busy one) have their time split as Kafka's request metrics split it
(``pykfk.metrics.stats.RequestStats``), from a few ``perf_counter`` readings: one at the
read, one as each handler returns, one per send. Every request is counted either way.
Without the endpoint no clock is read for them.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TypeAlias, cast

from pykfk._core.request_lane import ConnState, Lane, ServerState, Slot
from pykfk._core.sendfile import gather as _gather
from pykfk._core.sendfile import sendfile as _sendfile
from pykfk._core.wire import cut_frames as _cut_frames
from pykfk._core.wire import decode_request_header
from pykfk.metrics.stats import VERSION_SLOTS
from pykfk.protocol.types import FileRegion
from pykfk.server.dispatch import Chunks, CloseConnection, Dispatcher, Failed, RequestContext
from pykfk.server.session import ANONYMOUS, PLAINTEXT_SECURITY, ListenerSecurity, Session
from pykfk.server.tls import TlsProtocol, recv_buffer

log = logging.getLogger("pykfk.server")

READ_BUFFER_SIZE = 64 * 1024  # small frames are parsed in place from this buffer
LARGE_FRAME_CHUNK = 1024 * 1024  # growth step of a large frame's storage
HELD_BYTES_LIMIT = 32 * 1024 * 1024  # request bytes held per connection before pausing reads
IOV_MAX = 512  # buffers per sendmsg call (Linux IOV_MAX is 1024)
PREAD_CHUNK = 256 * 1024  # fallback path only
# Reads whose requests are timed: at most one a millisecond, broker-wide. Timing and
# filing a request's times cost about 5 us next to the 20 us of a small Produce answered
# at once (bench/bench_produce_request.py); capped so, they never take more than about
# 0.5% of the loop, however busy. (Kafka's own request histograms are samples too.)
TIMED_READ_INTERVAL_S = 0.001
# Byte chunks up to this total are joined into one buffer and sent with one send(): a
# copy of a few KiB costs less than building an iovec list (sendmsg) for them.
JOIN_BYTES_MAX = 256 * 1024
# A response with record bytes (FileRegion chunks) up to this total goes out whole in one
# send, its record bytes read into the buffer with preadv. A send is the costly call:
# on loopback it also runs the receiving end's TCP path. A sendfile per partition and a
# write of the header bytes between each cost more than copying a few KiB once
# (bench/latency: a long-polling consumer's 8-partition Fetch answers were 17 calls).
# Larger responses keep the zero-copy path.
GATHER_BYTES_MAX = 64 * 1024
_SIZE = struct.Struct(">i")



# One request's place in the response queue: its task, its chunks once answered, None
# (no response) or Failed.
SlotWork: TypeAlias = "asyncio.Future[Chunks | None] | Chunks | Failed | None"


def _is_file_region(chunk: object) -> bool:
    return type(chunk) is FileRegion


def _is_ready(work: SlotWork) -> bool:
    """Whether a slot's response can be written: answered (chunks or None), failed, or
    its task finished."""
    return type(work) is list or work is None or type(work) is Failed or cast("asyncio.Future[object]", work).done()


# A request in flight is a ``pykfk._core.request_lane.Slot``: its work, its context (api
# key, pinned regions; None for bytes that are no request), the request bytes it holds
# and, when requests are timed, its times (``perf_counter``).


class Connection(ConnState, asyncio.BufferedProtocol):
    """One client connection. Lives on the server's event loop. The state the compiled
    lane reads and writes per request (``_slots``, ``_start``, ``_closed``, ...) is in
    the C fields of ``ConnState``; the rest is in the instance's dict."""

    server: KafkaServer
    session: Session
    _slots: collections.deque[Slot]
    _slot_added: asyncio.Future[None] | None
    _sock: socket.socket | None

    def __init__(self, server: KafkaServer):
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.session = Session(server.security, "?")
        self._buf = bytearray(READ_BUFFER_SIZE)
        self._buf_view = memoryview(self._buf)  # one export for every get_buffer call
        self._start = 0  # first unparsed byte in _buf
        self._end = 0  # end of received bytes in _buf
        # Large-frame mode: chunks of the frame body received so far.
        self._large_size = -1
        self._large_chunks: list[bytearray] = []
        self._large_got = 0
        self._slots = collections.deque()
        self._slot_added = None
        self._held_bytes = 0
        self._reading_paused = False
        self._closed = False
        self._draining = False
        self._throttled_until = 0.0  # loop time; reading stays paused before it (quotas, KIP-219)
        self._throttle_timer: asyncio.TimerHandle | None = None
        # perf_counter at the last read, and as the last handler returned (a frame of a
        # read waits for the frames before it: its request queue time); 0.0 unless timed.
        self._timing = server.request_stats.timing
        self._timed_read = False  # this read's requests are timed
        self._read_at = 0.0
        self._handled_at = 0.0
        self._sock = None
        self._tls = False
        self._writer_task: asyncio.Task[None] | None = None
        self._writer_idle = False  # the writer waits for a slot: ready ones may be sent at once
        self._sent_turn = -1  # the server's turn in which this connection last sent at once
        self._deferred = False  # ready answers wait for the end of the turn (Lane.end_turn)
        self._write_waiter: asyncio.Future[None] | None = None
        self._can_write = asyncio.Event()  # fallback path flow control
        self._can_write.set()
        self.last_active = self.loop.time()

    # -- asyncio callbacks -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        security = self.server.security
        tls = self._tls = transport.get_extra_info("ssl_object") is not None
        principal = security.principal_of(transport.get_extra_info("peercert")) if tls else ANONYMOUS
        self.session = Session(security, self.peer, principal)
        self.session.on_failed_login = self._begin_drain
        self.session.on_throttle = self._throttle
        # Over TLS the transport encrypts: responses go through it (record bytes read
        # from the segment in bounded chunks), never straight to the socket.
        raw = None if tls else transport.get_extra_info("socket")
        if raw is not None:
            try:
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
            try:
                # Our own handle on the socket: the transport never writes, we do.
                self._sock = socket.socket(fileno=os.dup(raw.fileno()))
                self._sock.setblocking(False)
            except OSError:
                self._sock = None
        self.server.connections.add(self)
        self.server.connections_created += 1
        self._writer_task = self.loop.create_task(self._write_loop())
        log.debug("connection from %s", self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        # Free the state now rather than at the next full collection: the session's
        # callbacks are bound methods of this connection (a reference cycle), and a
        # frame cut off by the close may hold megabytes.
        self.session.on_failed_login = self.session.on_throttle = None
        self._large_chunks = []
        self._large_size = -1
        if self in self.server.connections:
            self.server.connections.discard(self)
            self.server.connections_closed += 1
        if self._writer_task is not None:
            self._writer_task.cancel()
        for slot in self._slots:
            if isinstance(slot.work, asyncio.Future):
                slot.work.cancel()
                slot.work.add_done_callback(slot.release_when_done)
            else:
                slot.release()
        self._slots.clear()
        self._stop_waiting_writable()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._slot_added is not None and not self._slot_added.done():
            self._slot_added.cancel()
        log.debug("connection from %s closed%s", self.peer, f": {exc}" if exc else "")

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # get_buffer and buffer_updated are ConnState's (compiled): a read of small frames
    # goes from there to the lane without a Python frame; the rest comes here.

    def _large_buffer(self) -> memoryview:
        """``get_buffer`` while a large frame is read into its own storage."""
        chunk = self._large_chunks[-1]
        filled = self._large_got - LARGE_FRAME_CHUNK * (len(self._large_chunks) - 1)
        return memoryview(chunk)[filled:]

    def _read_slow(self, nbytes: int) -> None:
        """``buffer_updated`` when requests are timed (the metrics endpoint is on) or a
        large frame is being read."""
        now = self.last_active
        if self._timing:
            stats = self.server.request_stats
            self._timed_read = now >= stats.next_timed_read
            if self._timed_read:
                stats.next_timed_read = now + TIMED_READ_INTERVAL_S
                self._read_at = self._handled_at = perf_counter()
        if self._large_size >= 0:
            self._large_got += nbytes
            if self._large_got == self._large_size:
                frame = self._large_chunks[0] if len(self._large_chunks) == 1 else bytearray().join(self._large_chunks)
                self._large_chunks = []
                self._large_size = -1
                self._deliver(frame)
                self._after_frames()
            elif self._large_got == LARGE_FRAME_CHUNK * len(self._large_chunks):
                self._grow_large()
            return
        self._end += nbytes
        if self._timed_read:
            self._parse_frames()
            self._after_frames()
        else:
            self.server.lane.read(self)  # the same, compiled

    def eof_received(self) -> bool | None:
        # The client will send no more requests; answer what is in flight, then close
        # (the socket stays half-open meanwhile; tls.py does the same for TLS).
        self._begin_drain()
        return True

    # -- framing ---------------------------------------------------------------------

    def _compact(self) -> None:
        pending = self._end - self._start
        if self._start:
            # Same-size slice assignment: never resizes (the buffer may be exported).
            self._buf[0:pending] = self._buf[self._start : self._end]
        self._start, self._end = 0, pending

    def _parse_frames(self) -> None:
        buf = self._buf
        start, end = self._start, self._end
        limit = self.server.max_request_bytes
        if end - start >= 4:
            # Every complete frame within the limits in one compiled call; what it leaves
            # (a partial frame, a size to refuse) is read again below.
            frames, start = _cut_frames(buf, start, end, limit if self.session.authenticated
                                        else self.server.max_prelogin_bytes)
            if frames:
                self._start = start
                if self._timed_read:
                    for frame in frames:
                        self._deliver(frame)
                        if self._closed:
                            return
                else:
                    # Untimed requests (all but a sample): the compiled lane.
                    self.server.lane.deliver(self, frames)
                    if self._closed:
                        return
        unpack = _SIZE.unpack_from
        deliver = self._deliver
        prelogin_limit = self.server.max_prelogin_bytes
        while end - start >= 4:
            size = unpack(buf, start)[0]
            if size > prelogin_limit and not self.session.authenticated:
                log.info("closing connection from %s: request size %d before authentication is above %d "
                         "(sasl.server.max.receive.size)", self.peer, size, prelogin_limit)
                self._start = start
                self.abort()
                return
            if size < 0 or size > limit:
                log.warning(
                    "closing connection from %s: request size %d is outside [0, %d] (socket.request.max.bytes)",
                    self.peer,
                    size,
                    limit,
                )
                self._start = start
                self.abort()
                return
            body_start = start + 4
            available = end - body_start
            if available >= size:
                start = body_start + size
                self._start = start
                deliver(buf[body_start:start])  # a copy: the frame outlives buf
                if self._closed:
                    return
                continue
            self._start = start
            if size > len(buf) - 4:
                # Too big for the shared buffer: switch to dedicated storage.
                self._large_size = size
                first = bytearray(min(size, LARGE_FRAME_CHUNK))
                first[:available] = buf[body_start:end]
                self._large_chunks = [first]
                self._large_got = available
                self._start = self._end = 0
                if self._large_got == len(first):  # pragma: no cover - needs size > chunk
                    self._grow_large()
                return
            if start + 4 + size > len(buf):
                self._compact()
            return
        if start == end:
            self._start = self._end = 0
        else:
            self._start = start

    def _grow_large(self) -> None:
        remaining = self._large_size - self._large_got
        self._large_chunks.append(bytearray(min(remaining, LARGE_FRAME_CHUNK)))

    def _deliver(self, frame: bytearray) -> None:
        if self._closed or self._draining:
            return
        started = self._handled_at
        try:
            work, ctx = self.server.lane.prepare(frame, self.session)
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", self.peer, exc)
            self.abort()
            return
        except Exception:
            log.exception("closing connection from %s: unexpected error decoding a request", self.peer)
            self.abort()
            return
        if type(work) is list or work is None or type(work) is Failed:
            slot = Slot(work, ctx, 0)  # answered already
        else:
            task = asyncio.ensure_future(cast("Awaitable[Chunks | None]", work))
            slot = Slot(task, ctx, len(frame))
            self._held_bytes += len(frame)
            task.add_done_callback(functools.partial(self.server.lane.request_done, self, slot))
        self._slots.append(slot)
        if self._timed_read:
            slot.timed = True
            slot.received, slot.started = self._read_at, started
            slot.handled = slot.ready = self._handled_at = perf_counter()

    def _after_frames(self) -> None:
        """After the frames of one read: send what is ready, wake the writer for the rest."""
        if self._slots and self._writer_idle and not self._closed:
            self._send_or_defer()
        # _update_reading has nothing to do unless reading is paused or should be.
        if (self._reading_paused or self._draining or self._held_bytes > HELD_BYTES_LIMIT
                or len(self._slots) >= self.server.max_in_flight):
            self._update_reading()

    def _wake_writer(self) -> None:
        """Wake the idle writer when it has work: a ready response at the head of the
        queue (one the direct send left: a failure, a large file region, the unsent tail),
        or nothing left to answer on a draining connection."""
        waiter = self._slot_added
        if waiter is None or waiter.done():
            return
        slots = self._slots
        if (_is_ready(slots[0].work) if slots else self._draining):
            waiter.set_result(None)

    def _send_or_defer(self) -> None:
        """Send the ready answers at the head of the queue now (the writer is idle), or,
        when this connection already sent in this turn of the event loop, at the turn's
        end with whatever else becomes ready meanwhile: answers ready in one turn leave
        in one send, and a lone answer leaves at once. (A loop that is not running has
        no turn to end: requests fed by hand, as the micro benches do, are answered at
        once.) Compiled: ``Lane.send_or_defer``."""
        self.server.lane.send_or_defer(self)

    def _send_ready_now(self) -> None:
        """Send the ready responses at the head of the queue with one send() (the writer
        is idle, so nothing older is outstanding): those answered at once, and those of
        finished tasks, record bytes of at most ``GATHER_BYTES_MAX`` read into the buffer.
        What the socket does not take, and everything from the first response still being
        worked on (or failed, or larger), is left to the writer. Compiled
        (``Lane.send_ready``)."""
        self.server.lane.send_ready(self)

    def _request_done(self, slot: Slot, _task: object = None) -> None:
        """A request's task ended: when its answer is the oldest outstanding and the
        writer is idle, send it with the ready ones behind it, without a turn of the
        writer task. Compiled: ``Lane.request_done``."""
        self.server.lane.request_done(self, slot, _task)

    def _throttle(self, seconds: float) -> None:
        """Read nothing from this client for ``seconds`` (its answer goes out now)."""
        until = self.loop.time() + seconds
        if until > self._throttled_until:
            self._throttled_until = until
            if self._throttle_timer is not None:
                self._throttle_timer.cancel()
            self._throttle_timer = self.loop.call_at(until, self._end_throttle)
        self._update_reading()

    def _end_throttle(self) -> None:
        # Cleared by the timer itself: a timer may fire a hair before its time.
        self._throttle_timer = None
        self._throttled_until = 0.0
        self._update_reading()

    def _update_reading(self) -> None:
        if self.transport is None or self._closed:
            return
        busy = (
            self._draining
            or len(self._slots) >= self.server.max_in_flight
            or self._held_bytes > HELD_BYTES_LIMIT
            or self._throttled_until > 0
        )
        if busy and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not busy and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    # -- writing ---------------------------------------------------------------------

    async def _write_loop(self) -> None:
        slots = self._slots
        try:
            while not self._closed:
                if not slots or not _is_ready(slots[0].work):
                    # Idle: nothing to answer, or the oldest request is still being worked
                    # on (its end sends what is ready, and wakes this for what it cannot).
                    if not slots and self._draining:
                        self.close()
                        return
                    self._slot_added = self.loop.create_future()
                    self._writer_idle = True
                    try:
                        await self._slot_added
                    finally:
                        self._writer_idle = False
                    continue
                slot = slots[0]
                work = slot.work
                try:
                    if type(work) is Failed:
                        raise work.error
                    # Failed was raised above: what is left is chunks, None, or a finished
                    # task (result() raises what its handler raised).
                    chunks = work.result() if isinstance(work, asyncio.Future) else cast("Chunks | None", work)
                except asyncio.CancelledError:
                    raise
                except CloseConnection as exc:
                    log.info("closing connection from %s: %s", self.peer, exc)
                    self.abort()
                    return
                except Exception:
                    log.exception("closing connection from %s: request handler failed", self.peer)
                    self.abort()
                    return
                slots.popleft()
                done = [slot]
                if chunks:
                    chunks = list(chunks)
                    # Ready responses queued behind this one go out in the same send.
                    while slots and (type(slots[0].work) is list or slots[0].work is None):
                        done.append(slots.popleft())
                        if done[-1].work:
                            chunks.extend(cast(Chunks, done[-1].work))
                timed = [finished for finished in done if finished.timed] if self._timing else None
                send_start = perf_counter() if timed else 0.0
                try:
                    if chunks:
                        await self._send(chunks)
                finally:
                    for finished in done:
                        finished.release()
                if timed:
                    self.server.request_stats.observe_sent(timed, send_start, perf_counter())
                self.last_active = self.loop.time()
                self._update_reading()
        except asyncio.CancelledError:
            pass
        except (OSError, EOFError) as exc:  # EOFError: a segment cut under a pending answer
            log.info("closing connection from %s: %s", self.peer, exc)
            self.abort()

    async def _send(self, chunks: Chunks) -> None:
        if self._sock is None:
            await self._send_via_transport(chunks)
            return
        if len(chunks) > 1:
            gathered = _gather(chunks, GATHER_BYTES_MAX)
            if gathered is not None:
                await self._send_buffers([gathered])
                return
        pending: Chunks = []
        for chunk in chunks:
            if _is_file_region(chunk):
                if pending:
                    await self._send_buffers(pending)
                    pending = []
                await self._send_file_region(chunk.fd, chunk.position, chunk.size)
            elif len(chunk):
                pending.append(chunk)
        if pending:
            await self._send_buffers(pending)

    async def _send_buffers(self, buffers: Chunks) -> None:
        if len(buffers) > 1 and sum(map(len, buffers)) <= JOIN_BYTES_MAX:
            buffers = [b"".join(buffers)]
        views = [memoryview(b).cast("B") for b in buffers]
        while views:
            sock = self._sock
            if sock is None:
                raise ConnectionResetError("connection closed")
            try:
                sent = sock.sendmsg(views[:IOV_MAX])
            except (BlockingIOError, InterruptedError):
                await self._wait_writable()
                continue
            # Drop what was sent; keep the unsent tail of a partly sent buffer.
            while sent and views:
                head = views[0]
                if sent >= len(head):
                    sent -= len(head)
                    views.pop(0)
                else:
                    views[0] = head[sent:]
                    sent = 0

    async def _send_file_region(self, in_fd: int, position: int, size: int) -> None:
        while size > 0:
            sock = self._sock
            if sock is None:
                raise ConnectionResetError("connection closed")
            sent = _sendfile(sock.fileno(), in_fd, position, size)
            if sent == 0:
                await self._wait_writable()
                continue
            position += sent
            size -= sent

    async def _wait_writable(self) -> None:
        if self._sock is None:
            raise ConnectionResetError("connection closed")
        fd = self._sock.fileno()
        waiter = self.loop.create_future()
        self._write_waiter = waiter

        def ready() -> None:
            if not waiter.done():
                waiter.set_result(None)

        self.loop.add_writer(fd, ready)
        try:
            await waiter
        finally:
            self._stop_waiting_writable()

    def _stop_waiting_writable(self) -> None:
        waiter, self._write_waiter = self._write_waiter, None
        if waiter is None:
            return
        if self._sock is not None:
            self.loop.remove_writer(self._sock.fileno())
        if not waiter.done():
            waiter.cancel()

    async def _send_via_transport(self, chunks: Chunks) -> None:
        """TLS connections (and transports without a socket): through the transport."""
        assert self.transport is not None
        for chunk in chunks:
            if _is_file_region(chunk):
                position, remaining = chunk.position, chunk.size
                while remaining > 0:
                    data = os.pread(chunk.fd, min(remaining, PREAD_CHUNK), position)
                    if not data:
                        raise OSError(f"file region ends early at {position}")
                    await self._can_write.wait()
                    self.transport.write(data)
                    position += len(data)
                    remaining -= len(data)
            else:
                await self._can_write.wait()
                self.transport.write(bytes(chunk))

    # -- closing ---------------------------------------------------------------------

    def _begin_drain(self) -> None:
        """Read no more requests; close once every request read so far is answered."""
        if self._draining or self._closed:
            return
        self._draining = True
        self._update_reading()
        self._wake_writer()
        if not self._slots and self._writer_task is not None and self._writer_task.done():
            self.close()

    async def drain_and_close(self) -> None:
        self._begin_drain()
        if self._writer_task is not None:
            await asyncio.shield(self._writer_task)

    @property
    def in_flight(self) -> int:
        return len(self._slots)

    def close(self) -> None:
        if self.transport is not None and not self._closed:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None and not self._closed:
            self._closed = True
            self.transport.abort()


def _tls_connection(server: KafkaServer, context: ssl.SSLContext, handshake_timeout: float,
                    shared_buffer: memoryview) -> TlsProtocol:
    return TlsProtocol(context, Connection(server), handshake_timeout, shared_buffer)


class KafkaServer(ServerState):
    """The listener: accepts connections and closes idle ones. What the compiled lane
    reads per request (limits, turn state) is in the C fields of ``ServerState``."""

    _deferred: list[Connection]

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        security: ListenerSecurity = PLAINTEXT_SECURITY,
        max_request_bytes: int,
        idle_ms: int,
        max_in_flight: int = 500,
        max_prelogin_bytes: int | None = None,
    ):
        self.loop = asyncio.get_running_loop()
        self.dispatcher = dispatcher
        self.security = security
        self.max_request_bytes = max_request_bytes
        # Kafka's sasl.server.max.receive.size: the largest frame a client that has not
        # logged in yet may send (only SASL listeners have such clients).
        self.max_prelogin_bytes = min(max_request_bytes, max_prelogin_bytes or max_request_bytes)
        self.idle_ms = idle_ms
        self.max_in_flight = max_in_flight
        self.request_stats = dispatcher.request_stats
        self.lane = Lane(dispatcher, dispatcher._handlers, dispatcher._specs, VERSION_SLOTS, CloseConnection, Failed,
                         RequestContext, decode_request_header, _gather, GATHER_BYTES_MAX, FileRegion,
                         asyncio.ensure_future, log, dispatcher._framing.encode_response,
                         _cut_frames, HELD_BYTES_LIMIT)
        # Turns of the event loop in which some connection sent at once: a connection
        # sends at most once a turn from a read or a finished task; what else becomes
        # ready in that turn leaves at its end (``Lane.end_turn``), in one send.
        self.turn = 0
        self._turn_marked = False
        self._deferred = []
        self.connections: set[Connection] = set()
        self.connections_created = 0
        self.connections_closed = 0
        self._server: asyncio.base_events.Server | None = None
        self._idle_task: asyncio.Task[None] | None = None

    async def bind(self, host: str, port: int) -> tuple[str, int]:
        """Bind host:port (port 0 picks a free one) without serving yet; returns the
        bound address. Connections wait in the kernel's backlog until ``serve``."""
        context = self.security.ssl_context
        factory: Callable[[], asyncio.BaseProtocol] = functools.partial(Connection, self)
        if context is not None:
            # TLS in front of the connection (tls.py). A handshake that never finishes
            # holds a connection no longer than an idle one would stay open (and never
            # more than 10 s).
            factory = functools.partial(_tls_connection, self, context, self._handshake_timeout_s(), recv_buffer())
        self._server = await self.loop.create_server(
            factory, host or None, port, reuse_address=True, backlog=1024, start_serving=False,
        )
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    def _handshake_timeout_s(self) -> float:
        return min(self.idle_ms / 1000, 10.0) if self.idle_ms > 0 else 10.0

    async def serve(self) -> None:
        """Start accepting connections and answering requests."""
        assert self._server is not None, "bind first"
        await self._server.start_serving()
        if self.idle_ms > 0:
            self._idle_task = self.loop.create_task(self._close_idle())

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """``bind`` and ``serve`` at once; returns the bound address."""
        address = await self.bind(host, port)
        await self.serve()
        return address

    async def _close_idle(self) -> None:
        period = min(max(self.idle_ms / 4000, 0.05), 10.0)
        while True:
            await asyncio.sleep(period)
            deadline = self.loop.time() - self.idle_ms / 1000
            for conn in list(self.connections):
                if conn.in_flight == 0 and conn.last_active < deadline:
                    log.debug("closing idle connection from %s (connections.max.idle.ms)", conn.peer)
                    conn.close()

    def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._idle_task is not None:
            self._idle_task.cancel()

    async def shutdown(self, timeout: float = 10.0) -> None:
        """Stop accepting, answer every request already read, close every connection."""
        self.stop_accepting()
        conns = list(self.connections)
        if conns:
            _done, pending = await asyncio.wait(
                [asyncio.ensure_future(c.drain_and_close()) for c in conns], timeout=timeout
            )
            for task in pending:
                task.cancel()
        for conn in list(self.connections):
            conn.abort()
        await asyncio.sleep(0)
