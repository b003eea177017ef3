"""Wake-ups for long-polling fetches (a minimal fetch purgatory, Kafka's DelayedFetch).

A Fetch that has less than ``min_bytes`` available parks here until an append to one of
its partitions, its ``max_wait_ms`` deadline, or broker shutdown. Appends wake waiters;
nobody polls.

The waiters are compiled (``pykfk._core.fetch_path.Waiters``: ``notify`` runs on every
append), and so is the Fetch handler's parked fetch, which registers itself there with
no task. ``park`` and ``wait`` serve Python callers (ShareFetch): a fetch parks once
(``park``: its partitions registered once, whatever the number of wake-ups) and learns
which partitions woke it (``Parked.take``), so a fetch of 10,000 partitions woken by an
append to one re-reads that one, not all 10,000.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from pykfk._core.fetch_path import Waiters

PartitionKey = tuple[str, int]


class Parked:
    """One parked fetch's interest in its partitions: registered by ``AppendWaiters.park``
    until ``close``; ``wait`` may be awaited any number of times meanwhile, and the
    partitions appended to since the last ``take`` accumulate in ``woken``."""

    __slots__ = ("_future", "_keys", "_owner", "woken")

    def __init__(self, owner: AppendWaiters, keys: list[PartitionKey]):
        self._owner = owner
        self._keys = keys
        self._future: asyncio.Future[None] | None = None
        self.woken: set[PartitionKey] = set()

    async def wait(self, timeout: float) -> None:
        """Return at once when a partition woke this fetch since the last ``take``; else
        after the next wake-up, ``timeout`` seconds or shutdown, whichever comes first."""
        if self.woken or self._owner._closed or timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        future = self._future = loop.create_future()
        timer = loop.call_later(timeout, _wake, future)
        try:
            await future
        finally:
            timer.cancel()
            self._future = None

    def take(self) -> set[PartitionKey]:
        """The partitions appended to since the last call (emptied)."""
        woken = self.woken
        if woken:
            self.woken = set()
        return woken

    def notify(self, key: PartitionKey) -> None:
        self.woken.add(key)
        self.wake()

    def wake(self) -> None:
        """End the current ``wait`` (shutdown, or an append)."""
        future = self._future
        if future is not None:
            _wake(future)

    def close(self) -> None:
        """Unregister (once per parked fetch, not per wake-up)."""
        waiting = self._owner._waiting
        for key in self._keys:
            parked = waiting.get(key)
            if parked is not None:
                parked.discard(self)
                if not parked:
                    del waiting[key]
        self._keys = []


class AppendWaiters(Waiters):
    """Partition -> fetches parked on it. Loop-affine."""

    def park(self, partitions: Iterable[PartitionKey]) -> Parked:
        """Register a fetch's interest in ``partitions`` until ``Parked.close``."""
        parked = Parked(self, list(partitions))
        waiting = self._waiting
        for key in parked._keys:
            found = waiting.get(key)
            if found is None:
                waiting[key] = {parked}
            else:
                found.add(parked)
        return parked

    async def wait(self, partitions: Iterable[PartitionKey], timeout: float) -> None:
        """Return after an append to one of ``partitions``, after ``timeout`` seconds, or
        at shutdown, whichever comes first."""
        if self._closed or timeout <= 0:
            return
        parked = self.park(partitions)
        try:
            await parked.wait(timeout)
        finally:
            parked.close()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
