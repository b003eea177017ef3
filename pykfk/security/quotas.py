"""Client quotas as Kafka applies them: byte rates and request time per user and
client id.

A quota entity names a user, a client id, or both; a ``None`` name is that type's
default. For one request the quota is the first entity with the setting, in Kafka's
order of precedence: (user, client-id), (user, default client-id), user,
(default user, client-id), (default user, default client-id), default user,
client-id, default client-id. Usage is measured per quota: per user when the entity
names a user (its default included), per client id when it names one, shared otherwise.

Rates are measured over ``windows`` samples of ``window_s`` seconds (Kafka's
``quota.window.num`` / ``quota.window.size.seconds``). A client over its quota is
throttled for the time that brings its measured rate back to the quota (KIP-219: the
answer says so in ``throttle_time_ms`` and the connection is not read meanwhile).
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Mapping

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
# Percent of one thread's time spent on the client's requests (here: of the event loop's).
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
USER, CLIENT_ID = "user", "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
MAX_THROTTLE_S = 30.0  # never mute a connection longer than this for one request

# (type, name) pairs sorted by type; name None = the type's default.
Entity = tuple[tuple[str, str | None], ...]


def entity_of(pairs: Mapping[str, str | None]) -> Entity:
    return tuple(sorted(pairs.items()))


def _precedence(user: str, client_id: str) -> list[Entity]:
    return [
        ((CLIENT_ID, client_id), (USER, user)), ((CLIENT_ID, None), (USER, user)), ((USER, user),),
        ((CLIENT_ID, client_id), (USER, None)), ((CLIENT_ID, None), (USER, None)), ((USER, None),),
        ((CLIENT_ID, client_id),), ((CLIENT_ID, None),),
    ]


class _Rate:
    """Amounts in fixed windows; the rate over the kept ones."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples: collections.deque[list[float]] = collections.deque()  # [window start, amount]

    def add(self, amount: float, now: float, window_s: float, windows: int) -> tuple[float, float]:
        """Record ``amount``; returns (total kept, seconds they span)."""
        samples = self.samples
        start = now - now % window_s
        if not samples or samples[-1][0] != start:
            samples.append([start, 0.0])
        samples[-1][1] += amount
        while samples and samples[0][0] <= now - window_s * windows:
            samples.popleft()
        total = sum(s[1] for s in samples)
        # Kafka counts the full windows before the current one and the elapsed part of it.
        span = max(now - samples[0][0], window_s)
        return total, span


class QuotaManager:
    """``record(key, user, client_id, amount, now)`` -> seconds to throttle (0: none)."""

    def __init__(self, configs: Callable[[], Mapping[Entity, Mapping[str, float]]], version: Callable[[], int],
                 window_s: float = 1.0, windows: int = 11):
        self._configs = configs
        self._version = version
        self.window_s = window_s
        self.windows = windows
        self._seen_version = -1
        self.active = False
        self.times_requests = False
        self.refresh()
        self._resolved: dict[tuple[str, str, str], tuple[tuple[str, str | None, str | None], float] | None] = {}
        self._rates: dict[tuple[str, str | None, str | None], _Rate] = {}

    def refresh(self) -> None:
        """Re-read which kinds of quota are set; call after every quota change (the
        request paths read the two flags only)."""
        configs = self._configs()
        self.active = bool(configs)  # any quota at all: else nothing needs measuring
        self.times_requests = any(REQUEST_PERCENTAGE in values for values in configs.values())

    def quota(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str | None, str | None], float] | None:
        """(usage key, bytes per second) of the quota that applies, or None."""
        version = self._version()
        if version != self._seen_version:
            self._resolved.clear()
            self._seen_version = version
        cache_key = (key, user, client_id)
        if cache_key in self._resolved:
            return self._resolved[cache_key]
        found = None
        configs = self._configs()
        for entity in _precedence(user, client_id):
            value = configs.get(entity, {}).get(key)
            if value is not None:
                types = {t for t, _name in entity}
                found = ((key, user if USER in types else None, client_id if CLIENT_ID in types else None), value)
                break
        if len(self._resolved) > 100_000:
            self._resolved.clear()
        self._resolved[cache_key] = found
        return found

    def record(self, key: str, user: str, client_id: str, amount: float, now: float) -> float:
        applied = self.quota(key, user, client_id)
        if applied is None:
            return 0.0
        usage_key, limit = applied
        rate = self._rates.get(usage_key)
        if rate is None:
            rate = self._rates[usage_key] = _Rate()
        total, span = rate.add(amount, now, self.window_s, self.windows)
        if limit <= 0 or math.isinf(limit):
            return 0.0
        excess = total / limit - span
        return min(excess, MAX_THROTTLE_S) if excess > 0 else 0.0
