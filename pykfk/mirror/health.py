"""Whether the mirror can reach each cluster, and what its clients log.

A cluster that stops answering (a broker down, a network cut) is not an error of the
mirror: it says so once ("target 127.0.0.1:9093 unreachable, retrying"), waits with a
growing pause before trying again, and says so once more when the cluster answers again
("target 127.0.0.1:9093 reachable again after 31 s"). librdkafka's own log lines go
through the ``pykfk.mirror.client`` logger: its reports of refused or lost connections
are dropped (the state line above says it once), other lines are kept, at most one per
kind a minute.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException

from pykfk.errors import KafkaError as AdminError

__all__ = ["CLIENT_ERRORS", "CLIENT_LOGGER", "ClusterState", "TargetUnavailable", "client_settings",
           "flush_while_answered", "metadata_pending", "retry_metadata_pending", "unreachable"]

log = logging.getLogger("pykfk.mirror")

CLIENT_LOGGER = logging.getLogger("pykfk.mirror.client")

T = TypeVar("T")

# The first pause after a failed attempt, and the longest (seconds).
FIRST_BACKOFF_S = 1.0
MAX_BACKOFF_S = 8.0
# One client log line of a kind (its facility and first words) per this many seconds.
CLIENT_LOG_INTERVAL_S = 60.0

# librdkafka's words for a broker it cannot reach or lost: the state line says it once.
_CONNECTION_NOISE = re.compile(
    r"Connect to .* failed|Connection refused|Disconnected|brokers are down|all brokers down|"
    r"Receive failed|Send failed|Connection reset|timed out|Timed out|_TRANSPORT|_ALL_BROKERS_DOWN|"
    r"_TIMED_OUT|_MSG_TIMED_OUT|Failed to resolve|_RESOLVE|Broker transport failure|"
    r"Coordinator .* unavailable|coordinator.*(down|unavailable)|Failed to acquire idempotence PID|"
    r"Not coordinator|NOT_COORDINATOR|COORDINATOR_NOT_AVAILABLE|COORDINATOR_LOAD_IN_PROGRESS|"
    r"Metadata request failed|Leader not available|LEADER_NOT_AVAILABLE|NOT_LEADER",
)

_CLIENT_NAME = re.compile(r"\[(rdkafka#|thrd:)[^\]]*\]")

# Error codes that mean the cluster is not answering (not that it refused something).
_UNREACHABLE_CODES = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT,
    KafkaError._RESOLVE, KafkaError._WAIT_COORD, KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TIMED_OUT_QUEUE,
})

# Error codes that mean the client does not know a partition or its leader yet: a leader
# failing over, a broker that restarted and is loading, a client that has not fetched the
# topic's metadata. librdkafka's watermark queries give _UNKNOWN_PARTITION at once when
# its metadata cache says so; the next metadata refresh usually answers.
_METADATA_PENDING_CODES = frozenset({
    KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
})
# Pauses between tries of a call whose partition's metadata is pending (seconds).
METADATA_FIRST_PAUSE_S = 0.1
METADATA_MAX_PAUSE_S = 1.0


class TargetUnavailable(Exception):
    """The target did not answer in time; what was being written is tried again later."""


# What a client call raises when a cluster did not answer or refused: confluent-kafka's
# producers and consumers (the copy) and pykfk's admin client (topics, settings, groups:
# pykfk.errors.KafkaError, ConnectionError_ among them). ``unreachable`` tells which.
CLIENT_ERRORS: tuple[type[Exception], ...] = (KafkaException, AdminError, TimeoutError)


def flush_while_answered(producer: Any, slice_s: float, limit_s: float) -> int:
    """``producer.flush`` for as long as the cluster keeps acknowledging (some records
    each ``slice_s``), at most ``limit_s``: a busy target is waited for, one that stopped
    answering is not. Returns the records still unacknowledged."""
    deadline = time.monotonic() + limit_s
    remaining = producer.flush(slice_s)
    while remaining and time.monotonic() < deadline:
        before, remaining = remaining, producer.flush(min(slice_s, max(0.0, deadline - time.monotonic())))
        if remaining >= before:
            break
    return int(remaining)


def unreachable(exc: BaseException) -> bool:
    """Does ``exc`` (from a client call) say the cluster did not answer, or not yet
    (a partition or its leader momentarily unknown)?"""
    if isinstance(exc, (TargetUnavailable, TimeoutError)):
        return True
    if isinstance(exc, AdminError):
        # No connection, no answer in time, or a leader, coordinator or topic not
        # known yet: Kafka's retriable codes (an authorization or login failure is not).
        return exc.retriable
    if isinstance(exc, KafkaException):
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError):
            return (error.code() in _UNREACHABLE_CODES or error.code() in _METADATA_PENDING_CODES
                    or (error.retriable() and not error.fatal()))
        return "timed out" in str(exc).lower()
    return False


def metadata_pending(exc: BaseException) -> bool:
    """Does ``exc`` say a partition or its leader is not known (yet)?"""
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(error, KafkaError) and error.code() in _METADATA_PENDING_CODES


def retry_metadata_pending(call: Callable[[float], T], timeout_s: float) -> T:
    """``call(seconds left)`` again, with a growing pause, while it fails because a
    partition or its leader is not known yet, for at most ``timeout_s`` in all; then
    the last error is raised (``unreachable`` says yes to it)."""
    deadline = time.monotonic() + timeout_s
    pause = METADATA_FIRST_PAUSE_S
    while True:
        try:
            return call(max(0.1, deadline - time.monotonic()))
        except KafkaException as exc:
            if not metadata_pending(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, METADATA_MAX_PAUSE_S)


class _ClientLogFilter(logging.Filter):
    """Drops connection noise; keeps one line per kind every CLIENT_LOG_INTERVAL_S."""

    def __init__(self) -> None:
        super().__init__()
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _CONNECTION_NOISE.search(message):
            return False
        # The kind: the facility and the first words, without the client's name.
        kind = " ".join(_CLIENT_NAME.sub("", message).split()[:8])
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(kind, -CLIENT_LOG_INTERVAL_S) < CLIENT_LOG_INTERVAL_S:
                return False
            self._last[kind] = now
        return True


CLIENT_LOGGER.addFilter(_ClientLogFilter())


class ClusterState:
    """Reachability of one cluster, as the mirror's calls find it. ``failed`` and
    ``ok`` print a line only when the state changes; ``ready`` says whether the pause
    after the last failure is over. Thread-safe (client callbacks may call ``failed``)."""

    def __init__(self, role: str, bootstrap: str, say: Callable[[str], None]):
        self.role = role
        self.bootstrap = bootstrap
        self._say = say
        self._lock = threading.Lock()
        self.down_since: float | None = None
        self._backoff = FIRST_BACKOFF_S
        self._retry_at = 0.0
        self.outages = 0
        self._quiet = False

    def quiet(self) -> None:
        """The mirror is closing: what its clients report on the way out is not news."""
        self._quiet = True

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, reason: str = "") -> None:
        with self._lock:
            now = time.monotonic()
            if self.down_since is None:
                self.down_since = now
                self.outages += 1
                self._backoff = FIRST_BACKOFF_S
                self._say(f"{self.role} {self.bootstrap} unreachable, retrying" + (f" ({reason})" if reason else ""))
            else:
                self._backoff = min(self._backoff * 2, MAX_BACKOFF_S)
            self._retry_at = now + self._backoff

    def ok(self) -> None:
        if self.down_since is None:
            return
        with self._lock:
            if self.down_since is None:
                return
            seconds = time.monotonic() - self.down_since
            self.down_since = None
            self._say(f"{self.role} {self.bootstrap} reachable again after {seconds:.0f} s")

    def ready(self) -> bool:
        """True unless the cluster is down and its pause is not over yet."""
        return self.down_since is None or time.monotonic() >= self._retry_at

    def seconds_to_retry(self) -> float:
        return max(0.0, self._retry_at - time.monotonic()) if self.down_since is not None else 0.0

    def on_client_error(self, error: KafkaError) -> None:
        """librdkafka's error callback. Connection failures are left to the mirror's own
        calls to judge (an idle client's connection closed by the broker is no outage)."""
        if self._quiet or error.code() in _UNREACHABLE_CODES:
            return
        if error.fatal():
            log.warning("%s client: %s", self.role, error.str())
        else:
            CLIENT_LOGGER.warning("%s client: %s", self.role, error.str())


def client_settings(state: ClusterState) -> dict[str, Any]:
    """Settings every librdkafka client of the cluster gets: logs through the filtered
    logger, cluster-wide errors to ``state``."""
    return {"logger": CLIENT_LOGGER, "error_cb": state.on_client_error}
