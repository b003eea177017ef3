"""A connection's per-request path, compiled (see request_lane.pyx)."""

from collections.abc import Callable, Mapping
from typing import Any

class ServerState:
    """A listener's state the lane reads per request (base of ``KafkaServer``)."""

    lane: Any
    request_stats: Any
    max_request_bytes: int
    max_prelogin_bytes: int
    max_in_flight: int
    turn: int
    _turn_marked: bool
    _deferred: list[Any]

class ConnState:
    """A connection's state the lane reads and writes per request (base of ``Connection``)."""

    server: Any
    loop: Any
    session: Any
    peer: str
    _buf: bytearray
    _buf_view: memoryview
    _large_size: int
    _timing: bool
    _timed_read: bool
    last_active: float
    _start: int
    _end: int
    _slots: Any
    _slot_added: Any
    _sock: Any
    _held_bytes: int
    _sent_turn: int
    _throttled_until: float
    _handled_at: float
    _closed: bool
    _draining: bool
    _reading_paused: bool
    _writer_idle: bool
    _deferred: bool

    def get_buffer(self, sizehint: int) -> memoryview:
        """``asyncio.BufferedProtocol.get_buffer``: the free end of the read buffer."""
    def buffer_updated(self, nbytes: int) -> None:
        """``asyncio.BufferedProtocol.buffer_updated``: untimed reads to ``Lane.read``."""

class RequestCore:
    """A request context's fields (base of ``pykfk.server.dispatch.RequestContext``)."""

    broker: Any
    registry: Any
    session: Any
    client_id: str | None
    api_key: int
    api_version: int
    correlation_id: int
    own_time: float
    pinned: list[Any]

class Slot:
    """One request in flight on a connection: its work, context, held request bytes and
    sampled times."""

    work: Any
    ctx: Any
    frame_size: int
    timed: bool
    received: float
    started: float
    handled: float
    ready: float

    def __init__(self, work: Any, ctx: Any, frame_size: int) -> None: ...
    def release(self) -> None:
        """Give back the segment regions its answer sends from."""
    def release_when_done(self, _future: object) -> None: ...
    def __call__(self, _task: object) -> None:
        """Its task's done callback: ``Lane.request_done``."""

class Lane:
    """One broker's compiled request path."""

    def __init__(self, dispatcher: Any, handlers: Mapping[int, Any], specs: Mapping[int, Any], version_slots: int,
                 close_error: type[Exception], failed: type, ctx_type: type[RequestCore],
                 decode_request_header: Callable[..., Any], gather: Callable[..., Any], gather_max: int,
                 region_type: type, ensure_future: Callable[..., Any], log: Any, framing_encode: Callable[..., Any],
                 cut_frames: Callable[..., Any], held_limit: int) -> None: ...
    def prepare(self, frame: bytearray, session: Any) -> tuple[Any, Any]:
        """``Dispatcher.prepare``: ``(work, ctx)``, or CloseConnection raised."""
    def deliver(self, conn: ConnState, frames: list[bytearray]) -> None:
        """``Connection._deliver`` for each of ``frames``."""
    def send_ready(self, conn: ConnState) -> None:
        """``Connection._send_ready_now``: the ready answers at the head of the queue in one send."""
    def read(self, conn: ConnState) -> None:
        """``Connection._parse_frames`` and ``_after_frames`` for a read whose requests are not timed."""
    def request_done(self, conn: ConnState, slot: Slot, _task: object = None) -> None:
        """``Connection._request_done``: a request's task ended."""
    def send_or_defer(self, conn: ConnState) -> None:
        """Send the ready answers now, or at the end of this loop turn."""
    def end_turn(self, server: ServerState) -> None:
        """``KafkaServer.end_turn``, compiled."""
