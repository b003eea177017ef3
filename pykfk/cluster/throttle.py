"""The reassignment throttles (Kafka's replication quotas, KIP-73):
``follower.replication.throttled.rate``, the bytes per second a broker fetches for the
replicas it is adding in a partition reassignment, and
``leader.replication.throttled.rate``, the bytes per second a leader sends to replicas
being added. They apply to the replicas ``kafka-reassign-partitions --throttle`` names:
those being added; replicas already in sync are never held back."""

from __future__ import annotations

from collections.abc import Callable

from pykfk.clock import Clock

# Kafka's default rate, Long.MAX_VALUE: no throttle.
UNLIMITED = 2**63 - 1


class ByteRateThrottle:
    """A token bucket holding at most one second of the rate: a fetch may go ahead while
    the bucket is not empty, and the bytes it brought are taken out afterwards (the
    bucket may go below zero; that debt is waited off). ``rate()`` is read at every use,
    so a dynamic config change applies at once. Loop-affine."""

    def __init__(self, rate: Callable[[], int], clock: Clock):
        self._rate = rate
        self._clock = clock
        self._tokens = 0.0
        self._last: float | None = None

    @property
    def rate(self) -> int:
        return self._rate()

    @property
    def limited(self) -> bool:
        return self._rate() < UNLIMITED

    def exceeded(self) -> bool:
        """True while the bytes already fetched are ahead of the rate."""
        return self.limited and self._refill() <= 0

    def record(self, size: int) -> None:
        """``size`` bytes were fetched for a throttled replica."""
        if self.limited:
            self._tokens = self._refill() - size

    def _refill(self) -> float:
        rate, now = self._rate(), self._clock.monotonic()
        if self._last is None:
            self._tokens = float(rate)  # a full bucket at the first use
        else:
            self._tokens = min(float(rate), self._tokens + (now - self._last) * rate)
        self._last = now
        return self._tokens
