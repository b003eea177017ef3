"""A connection's per-request path, compiled (see request_lane.pyx)."""

from collections.abc import Callable, Mapping
from typing import Any

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

class Lane:
    """One broker's compiled request path."""

    def __init__(self, dispatcher: Any, handlers: Mapping[int, Any], specs: Mapping[int, Any], version_slots: int,
                 close_error: type[Exception], failed: type, ctx_type: type, decode_request_header: Callable[..., Any],
                 gather: Callable[..., Any], gather_max: int, region_type: type, ensure_future: Callable[..., Any],
                 partial: Callable[..., Any], log: Any, framing_encode: Callable[..., Any],
                 cut_frames: Callable[..., Any], held_limit: int) -> None: ...
    def prepare(self, frame: bytearray, session: Any) -> tuple[Any, Any]:
        """``Dispatcher.prepare``: ``(work, ctx)``, or CloseConnection raised."""
    def deliver(self, conn: Any, frames: list[bytearray]) -> None:
        """``Connection._deliver`` for each of ``frames``."""
    def send_ready(self, conn: Any) -> None:
        """``Connection._send_ready_now``: the ready answers at the head of the queue in one send."""
    def read(self, conn: Any) -> None:
        """``Connection._parse_frames`` and ``_after_frames`` for a read whose requests are not timed."""
    def request_done(self, conn: Any, slot: Slot, _task: object = None) -> None:
        """``Connection._request_done``: a request's task ended."""
    def send_or_defer(self, conn: Any) -> None:
        """Send the ready answers now, or at the end of this loop turn."""
    def end_turn(self, server: Any) -> None:
        """``KafkaServer.end_turn``, compiled."""
