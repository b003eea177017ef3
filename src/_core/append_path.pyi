"""The Produce handler's walk and plain appends, compiled (see append_path.pyx)."""

from collections.abc import Callable
from typing import Any

def configure(kafka_error: type[Exception], leader_role: str, internal_topics: frozenset[str], none_code: int,
              not_enough_after_code: int, write_operation: Any, topic_resource: Any, offset_moves: Any) -> None:
    """The broker's pieces the core must not import."""
def counts() -> tuple[int, int]:
    """(partitions appended by the compiled lane, partitions handed to Python)."""
def produce(ctx: Any, request: tuple[Any, int, int, list[Any]],
            slow_factory: Callable[[Any, Any, list[Any]], Any]) -> tuple[list[Any], Any, list[Any]]:
    """(responses, the Python path's object or None, the acks=all waits)."""
