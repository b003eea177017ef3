"""The Produce handler's walk and plain appends, compiled (see append_path.pyx)."""

from collections.abc import Callable
from typing import Any

class LogState:
    """A log's state that appends read and move, as C fields (the base of Log)."""

    _log_end_offset: int
    _log_start_offset: int
    _recovery_point: int
    _high_watermark: int | None
    _writable: bool
    _plain_appends: bool
    _flush_messages: int
    _segment_bytes: int
    _max_segment_ms: int
    _max_message_bytes: int
    _lock: Any
    producer_state: Any
    _view: Any
    @property
    def _active(self) -> Any:
        """The last segment of ``_view`` (None while it has none)."""

class LeaderState:
    """What the Produce lane reads of a partition replica, as C fields (the base of Partition)."""

    role: str
    leader_epoch: int
    isr: frozenset[int]
    remote: dict[int, Any]
    append_lane: tuple[Any, ...]

def configure(kafka_error: type[Exception], leader_role: str, internal_topics: frozenset[str], none_code: int,
              not_enough_after_code: int, write_operation: Any, topic_resource: Any, offset_moves: Any,
              batch_metadata: Any, slow_factory: Callable[[Any, Any, list[Any]], Any],
              finish: Callable[[Any, Any, Any, Any, list[Any]], Any], may_write_transactions: Callable[[Any, Any], bool],
              refuse_transactional: Callable[[Any, Any], Any]) -> None:
    """The broker's pieces the core must not import, and the handler's Python for what
    ``handle`` leaves to it."""
def counts() -> tuple[int, int]:
    """(partitions appended by the compiled lane, partitions handed to Python)."""
def handle(ctx: Any, request: tuple[Any, int, int, list[Any]]) -> Any:
    """The Produce handler: the response body, None (acks=0) or a coroutine giving it."""
def encode_response(version: int, correlation_id: int, body: Any) -> list[bytes]:
    """The Produce answer's frame as one chunk."""
