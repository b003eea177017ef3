"""The counters a broker keeps for its metrics: plain ints and lists, no metrics library.

The Produce and Fetch paths touch these objects, so what they pay is an attribute or list
increment, never a call into a metrics library or a lookup by label: a partition holds
its topic's ``TopicStats``, the dispatcher counts a request with one list index, and with
the endpoint on the connections time a sample of requests (``perf_counter``, a bisection
into fixed buckets).
``pykfk.metrics.collector`` turns them into Prometheus metrics when scraped, together
with what is read from the broker's state at that moment (log sizes, the ISR, lag).

Everything here is loop-affine except ``FlushStats``, which log flushes on worker
threads update under its lock.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Protocol

# Request time bucket bounds in seconds, exported in ms (Kafka's request metrics are in
# ms). From 50 us, about what a Produce answered at once takes, to 30 s, the request
# timeout clients use by default; three buckets a decade.
LATENCY_BOUNDS_S: tuple[float, ...] = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)
# Flush time bounds in seconds: an fsync takes from tens of us (nothing dirty) to seconds.
FLUSH_BOUNDS_S: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
)

# Requests are counted in a flat list indexed by api_key * VERSION_SLOTS + api_version.
# Kafka's api keys stay below 128 and its versions below 32 (the highest, Fetch, is 17).
API_KEY_SLOTS = 128
VERSION_SLOTS = 32


class TopicStats:
    """Kafka's ``BrokerTopicMetrics`` of one topic, as running totals."""

    __slots__ = ("bytes_in", "bytes_out", "failed_fetch_requests", "failed_produce_requests",
                 "messages_in", "replication_bytes_in", "replication_bytes_out")

    def __init__(self) -> None:
        self.messages_in = 0  # records appended as leader
        self.bytes_in = 0  # record bytes appended as leader
        self.bytes_out = 0  # record bytes sent to consumers
        self.replication_bytes_in = 0  # record bytes appended as follower
        self.replication_bytes_out = 0  # record bytes sent to followers
        self.failed_produce_requests = 0  # partitions of Produce requests answered with an error
        self.failed_fetch_requests = 0  # partitions of Fetch requests answered with an error


class BrokerTopicStats:
    """``TopicStats`` by topic name. Loop-affine."""

    def __init__(self) -> None:
        self._topics: dict[str, TopicStats] = {}

    def for_topic(self, topic: str) -> TopicStats:
        stats = self._topics.get(topic)
        if stats is None:
            stats = self._topics[topic] = TopicStats()
        return stats

    def items(self) -> list[tuple[str, TopicStats]]:
        return list(self._topics.items())

    def topics(self) -> list[str]:
        return list(self._topics)

    def remove(self, topic: str) -> None:
        """Forget a deleted topic (a partition that still holds its stats keeps counting
        into an object nobody exports)."""
        self._topics.pop(topic, None)


class Histogram:
    """Observations in fixed buckets: ``counts[i]`` holds the values at most
    ``bounds[i]`` (and above ``bounds[i-1]``), the last slot the ones above every bound."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]):
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += times
        self.sum += value * times

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[int]:
        """Counts of values at most each bound, then the total (Prometheus' ``le``)."""
        out, running = [], 0
        for count in self.counts:
            running += count
            out.append(running)
        return out


# The parts of a request's time, as Kafka's RequestMetrics splits it.
REQUEST_QUEUE, LOCAL, REMOTE, RESPONSE_QUEUE, RESPONSE_SEND, TOTAL = range(6)
TIME_PARTS = ("requestqueuetimems", "localtimems", "remotetimems", "responsequeuetimems",
              "responsesendtimems", "totaltimems")
_PARTS = len(TIME_PARTS)
_BUCKETS = len(LATENCY_BOUNDS_S) + 1


class RequestTiming(Protocol):
    """The request facts the request metrics need (``RequestContext`` has them)."""

    @property
    def api_key(self) -> int: ...
    @property
    def own_time(self) -> float:
        """The handler's work after its first step, in seconds."""
        ...


class TimedRequest(Protocol):
    """An answered request's ``perf_counter`` readings: the read that completed its frame,
    the start and end of its handler's first step, and its answer (the end of its task
    when it had one, else the end of the first step)."""

    @property
    def ctx(self) -> RequestTiming | None: ...
    @property
    def received(self) -> float: ...
    @property
    def started(self) -> float: ...
    @property
    def handled(self) -> float: ...
    @property
    def ready(self) -> float: ...


class RequestStats:
    """Requests by api key and version, and their time by api key. Loop-affine.

    ``counts[api_key * VERSION_SLOTS + api_version]`` is bumped by the dispatcher for
    every request it starts; ``observe_sent`` files the times of answered requests. The
    parts of a request's time (``TIME_PARTS``):

    - request queue: from the socket read that completed the frame to the start of its
      handler (frames of one read are handled in turn);
    - local: the handler's own work, decoding and encoding included;
    - remote: waiting (acks=all for the ISR, a long-poll Fetch for data);
    - response queue: from the answer to the start of its send (answers leave in
      request order, and the answers of one read leave together);
    - response send: writing it to the socket;
    - total: from the read to the end of the send.

    Requests are timed only when ``timing`` is set (the metrics endpoint is on), and then
    those of at most one socket read a millisecond (``next_timed_read``, in event loop
    time, is when the connections may time the next one): every request of a quiet
    broker, a sample of a busy one, whose counts (``counts``) stay exact. Filing a
    time is a bisection and two list updates; what Python makes expensive is avoided: a
    part that took no time (no frame before it in its read, no wait) is not filed at all
    (every request has a total time: ``times`` puts the difference in the first bucket),
    a time below the first bound needs no bisection, and the send and total times of
    answers sent together are bisected once.
    """

    def __init__(self, *, timing: bool = False) -> None:
        self.timing = timing
        self.next_timed_read = 0.0
        self.counts = [0] * (API_KEY_SLOTS * VERSION_SLOTS)
        # Per api key once timed: the six parts' bucket counts in one list (part *
        # _BUCKETS + bucket), and their sums.
        self._times: list[tuple[list[int], list[float]] | None] = [None] * API_KEY_SLOTS
        self.throttle_time_s: dict[str, float] = {}  # quota type -> throttle time given
        self.throttled: dict[str, int] = {}  # quota type -> responses throttled

    def requests(self) -> list[tuple[int, int, int]]:
        """(api_key, api_version, count) of every pair seen."""
        return [(index // VERSION_SLOTS, index % VERSION_SLOTS, count)
                for index, count in enumerate(self.counts) if count]

    def times(self) -> dict[int, list[Histogram]]:
        """api key -> a Histogram per part of ``TIME_PARTS`` (zeros included)."""
        out = {}
        for api_key, entry in enumerate(self._times):
            if entry is None:
                continue
            buckets, sums = entry
            answered = sum(buckets[TOTAL * _BUCKETS:])
            parts = []
            for part, total in enumerate(sums):
                histogram = Histogram(LATENCY_BOUNDS_S)
                histogram.counts = buckets[part * _BUCKETS:(part + 1) * _BUCKETS]
                histogram.counts[0] += answered - sum(histogram.counts)
                histogram.sum = total
                parts.append(histogram)
            out[api_key] = parts
        return out

    def observe_sent(self, requests: Iterable[TimedRequest], send_start: float, sent: float) -> None:
        """File the times of ``requests``, whose answers a send that started at
        ``send_start`` finished at ``sent`` (or that needed no answer). On the path of
        every request: plain locals and list slots, no call per part."""
        all_times = self._times
        bounds, nb = LATENCY_BOUNDS_S, _BUCKETS
        first = bounds[0]
        send = sent - send_start
        send_index = RESPONSE_SEND * nb + (0 if send <= first else bisect_left(bounds, send))
        # Answers of one read share their read time, hence their total time.
        last_received = total = -1.0
        total_index = 0
        for request in requests:
            ctx = request.ctx
            if ctx is None:
                continue  # bytes that were no request (the rest of a partial send)
            api_key = ctx.api_key
            entry = all_times[api_key]
            if entry is None:
                entry = all_times[api_key] = ([0] * (_PARTS * nb), [0.0] * _PARTS)
            buckets, sums = entry
            received, started, handled = request.received, request.started, request.handled
            if started > received:
                queue = started - received
                buckets[0 if queue <= first else bisect_left(bounds, queue)] += 1
                sums[REQUEST_QUEUE] += queue
            ready = request.ready
            if ready > handled:  # answered by a task: its own steps are local time
                own = ctx.own_time
                local = handled - started + own
                remote = ready - handled - own
                if remote > 0.0:
                    buckets[REMOTE * nb + bisect_left(bounds, remote)] += 1
                    sums[REMOTE] += remote
            else:
                local, ready = handled - started, handled
            buckets[nb + (0 if local <= first else bisect_left(bounds, local))] += 1
            sums[LOCAL] += local
            if send_start > ready:
                response_queue = send_start - ready
                buckets[RESPONSE_QUEUE * nb + bisect_left(bounds, response_queue)] += 1
                sums[RESPONSE_QUEUE] += response_queue
            buckets[send_index] += 1
            sums[RESPONSE_SEND] += send
            if received != last_received:
                last_received, total = received, sent - received
                total_index = TOTAL * nb + (0 if total <= first else bisect_left(bounds, total))
            buckets[total_index] += 1
            sums[TOTAL] += total

    def throttle(self, quota_type: str, seconds: float) -> None:
        self.throttle_time_s[quota_type] = self.throttle_time_s.get(quota_type, 0.0) + seconds
        self.throttled[quota_type] = self.throttled.get(quota_type, 0) + 1


class ReplicationStats:
    """ISR changes of the partitions this broker leads (Kafka's ``IsrShrinksPerSec``,
    ``IsrExpandsPerSec``), whether the leader or the controller stored them (a dead
    follower is dropped by the controller), counted as the leader applies them."""

    __slots__ = ("isr_expands", "isr_shrinks")

    def __init__(self) -> None:
        self.isr_shrinks = 0
        self.isr_expands = 0


class FlushStats:
    """Log flushes and their time (Kafka's ``LogFlushRateAndTimeMs``). Thread-safe:
    flushes run on worker threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.histogram = Histogram(FLUSH_BOUNDS_S)

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.histogram.observe(seconds)

    def snapshot(self) -> tuple[list[int], float]:
        """(cumulative counts, sum) taken together."""
        with self._lock:
            return self.histogram.cumulative(), self.histogram.sum
