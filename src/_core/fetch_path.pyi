"""The Fetch handler's work per partition, compiled (see fetch_path.pyx)."""

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

def configure(kafka_error: type[Exception], preferred_read_replica: Callable[[Any, str, int, str], int],
              none_code: int, authorization_failed_code: int, out_of_range_code: int, leader_role: str) -> None:
    """The broker's pieces the core must not import."""
def counts() -> tuple[int, int]:
    """(partitions read with no Python call, partitions read through the replica manager's Python)."""
def read_log(log: Any, offset: int, max_bytes: int, max_offset: int | None,
             min_one_message: bool) -> tuple[Any, int, int, int] | None:
    """A log's read: (region or None, log start, log end, high watermark); None when out of range."""
def partition_error(partition: int, code: int) -> Any:
    """A partition's answer carrying only ``code``."""
def read_partition(ctx: Any, topic: str, part: Any, replica_id: int, remaining: int, first: bool, first_pass: bool,
                   read_committed: bool, client_rack: str | None) -> tuple[Any, int, bool]:
    """One partition's answer, its record bytes, and whether to answer at once."""
def read_all(ctx: Any, topics: Sequence[Any], replica_id: int, max_bytes: int, first_pass: bool,
             denied: Collection[str], read_committed: bool, client_rack: str | None,
             known_as: Mapping[str, Any] | None) -> tuple[list[Any], int, bool]:
    """One pass over the requested partitions: (responses, bytes available, answer now)."""
def count_bytes_out(stats: Any, responses: list[Any], replication: bool) -> None:
    """Per topic, the record bytes of the answer."""
def session_answer(partitions: Mapping[tuple[str, int], Any], responses: list[Any], incremental: bool) -> list[Any]:
    """An incremental fetch session's answer: only partitions with news when incremental."""

class Waiters:
    """Partition -> fetches parked on it (the fetch purgatory); loop-affine."""

    _waiting: dict[tuple[str, int], set[Any]]
    _closed: bool
    notified: int
    def notify(self, topic: str, partition: int) -> None:
        """Called after an append to (topic, partition)."""
    def wake_all(self) -> None:
        """Shutdown: every parked fetch answers now with what it has."""

def configure_handler(get_running_loop: Callable[[], Any], topic_names: Callable[[Any], Any],
                      open_session: Callable[..., Any], denied_topics: Callable[..., Any],
                      encode_generic: Callable[..., Any], answer_later: Callable[..., Any],
                      consumer_byte_rate: str, unknown_topic_id_code: int) -> None:
    """The handler's Python pieces."""
def encode_answer(version: int, correlation_id: int, body: Any) -> Any:
    """A Fetch response frame as chunks (the generic encoder for what the compiled one leaves out)."""
def handle(ctx: Any, request: Any) -> Any:
    """Fetch (key 1): the body now, or the parked fetch's Future (or coroutine)."""
