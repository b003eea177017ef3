"""The counters a broker keeps for its metrics: plain ints and lists, no metrics library.

The Produce and Fetch paths touch these objects, so what they pay is an attribute or list
increment, never a call into a metrics library or a lookup by label: a partition holds
its topic's ``TopicStats``, the dispatcher counts a request with one list index, the
connection times requests with ``perf_counter`` and a bisection into fixed buckets.
``pykfk.metrics.collector`` turns them into Prometheus metrics when scraped, together
with what is read from the broker's state at that moment (log sizes, the ISR, lag).

Everything here is loop-affine except ``FlushStats``, which log flushes on worker
threads update under its lock.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import partial
from itertools import compress
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

    def add_all(self, values: Iterable[float]) -> None:
        """``observe`` each of ``values``, in C-level passes (no Python step per value)."""
        values = values if isinstance(values, (list, array)) else list(values)
        for index, count in Counter(map(partial(bisect_left, self.bounds), values)).items():
            self.counts[index] += count
        self.sum += sum(values)

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
_RECORD = 1 + len(TIME_PARTS)  # a pending request: its api key, then its time parts


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
    every request it starts; ``observe_sent`` takes the times of answered requests. The
    parts of a request's time (``TIME_PARTS``):

    - request queue: from the socket read that completed the frame to the start of its
      handler (frames of one read are handled in turn);
    - local: the handler's own work, decoding and encoding included;
    - remote: waiting (acks=all for the ISR, a long-poll Fetch for data);
    - response queue: from the answer to the start of its send (answers leave in
      request order, and the answers of one read leave together);
    - response send: writing it to the socket;
    - total: from the read to the end of the send.

    Requests are timed only when ``timing`` is set (the metrics endpoint is on). A timed
    request costs one ``array.extend`` of its api key and six times; ``fold`` files what
    accumulated into the histograms in bulk, with C-level passes (bisection by ``map``,
    counting by ``Counter``) instead of Python steps per value, at each scrape and
    whenever ``FOLD_RECORDS`` requests wait, which bounds the memory.
    """

    # Records kept before a fold: 4096 * 7 doubles, 224 KiB; a fold of that many takes
    # a few ms of the loop.
    FOLD_RECORDS = 4096

    def __init__(self, *, timing: bool = False) -> None:
        self.timing = timing
        self.counts = [0] * (API_KEY_SLOTS * VERSION_SLOTS)
        self._histograms: dict[int, list[Histogram]] = {}
        # (api_key, queue, local, remote, response queue, send, total) of each timed
        # request not folded yet, seven by seven.
        self._pending = array("d")
        self._fold_at = self.FOLD_RECORDS * _RECORD
        self.throttle_time_s: dict[str, float] = {}  # quota type -> throttle time given
        self.throttled: dict[str, int] = {}  # quota type -> responses throttled

    def requests(self) -> list[tuple[int, int, int]]:
        """(api_key, api_version, count) of every pair seen."""
        return [(index // VERSION_SLOTS, index % VERSION_SLOTS, count)
                for index, count in enumerate(self.counts) if count]

    def times(self) -> dict[int, list[Histogram]]:
        """api key -> a Histogram per part of ``TIME_PARTS``, everything folded."""
        self.fold()
        return self._histograms

    def observe_sent(self, requests: Iterable[TimedRequest], send_start: float, sent: float) -> None:
        """Take the times of ``requests``, whose answers a send that started at
        ``send_start`` finished at ``sent`` (or that needed no answer). On the path of
        every request: arithmetic and one append per request, nothing per part."""
        record = self._pending.extend
        send = sent - send_start
        for request in requests:
            ctx = request.ctx
            if ctx is None:
                continue  # bytes that were no request (the rest of a partial send)
            received, started, handled, ready = request.received, request.started, request.handled, request.ready
            own = ctx.own_time
            if ready < handled:  # noqa: PLR1730 (a max() call costs more)
                ready = handled
            remote = ready - handled - own
            record((ctx.api_key, started - received, handled - started + own,
                    remote if remote > 0.0 else 0.0,  # noqa: FURB136 (as above)
                    send_start - ready if send_start > ready else 0.0, send, sent - received))
        if len(self._pending) >= self._fold_at:
            self.fold()

    def fold(self) -> None:
        """File the pending times into the histograms."""
        pending, self._pending = self._pending, array("d")
        if not pending:
            return
        api_keys = pending[0::_RECORD]
        distinct = set(api_keys)
        for api_key_value in distinct:
            api_key = int(api_key_value)
            histograms = self._histograms.get(api_key)
            if histograms is None:
                histograms = self._histograms[api_key] = [Histogram(LATENCY_BOUNDS_S) for _ in TIME_PARTS]
            mine = None if len(distinct) == 1 else list(map(api_key_value.__eq__, api_keys))
            for part, histogram in enumerate(histograms):
                values: Iterable[float] = pending[part + 1::_RECORD]
                if mine is not None:
                    values = list(compress(values, mine))
                histogram.add_all(values)

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
