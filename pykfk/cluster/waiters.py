"""Wake-ups for long-polling fetches (a minimal fetch purgatory, Kafka's DelayedFetch).

A Fetch that has less than ``min_bytes`` available parks here until an append to one of
its partitions, its ``max_wait_ms`` deadline, or broker shutdown. Appends wake waiters;
nobody polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

PartitionKey = tuple[str, int]


class AppendWaiters:
    """Partition -> futures of fetches waiting for an append there. Loop-affine."""

    def __init__(self) -> None:
        self._waiting: dict[PartitionKey, set[asyncio.Future[None]]] = {}
        self._closed = False

    async def wait(self, partitions: Iterable[PartitionKey], timeout: float) -> None:
        """Return after an append to one of ``partitions``, after ``timeout`` seconds, or
        at shutdown, whichever comes first."""
        if self._closed or timeout <= 0:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        keys = list(partitions)
        for key in keys:
            self._waiting.setdefault(key, set()).add(waiter)
        timer = loop.call_later(timeout, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            for key in keys:
                futures = self._waiting.get(key)
                if futures is not None:
                    futures.discard(waiter)
                    if not futures:
                        del self._waiting[key]

    def notify(self, topic: str, partition: int) -> None:
        """Called after an append to (topic, partition)."""
        if not self._waiting:
            return  # nobody long-polls (every produce-only run): no key to build
        futures = self._waiting.get((topic, partition))
        if futures:
            for waiter in futures:
                _wake(waiter)

    def wake_all(self) -> None:
        """Shutdown: every parked fetch answers now with what it has."""
        self._closed = True
        for futures in self._waiting.values():
            for waiter in futures:
                _wake(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
