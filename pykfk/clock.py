"""Time for broker code: one injected clock instead of ``time`` and ``loop.call_later``
scattered through the code (Kafka's ``Time`` / ``MockTime``).

``SystemClock`` is real time on the running event loop. ``ManualClock`` moves only when
a test calls ``advance``: every timer that came due runs, in due order, and sleepers
wake, so session timeouts, ISR lag and rebalance delays are tested without waiting and
without racing real timers. Both are loop-affine: use them from the event loop's thread.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What broker code asks of time."""

    def time_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record and commit timestamps)."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary start, never going back (timeouts, lag)."""
        ...

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run ``callback(*args)`` on the loop after ``delay_s`` seconds."""
        ...

    async def sleep(self, delay_s: float) -> None: ...


class SystemClock:
    """Real time; timers and sleeps on the running event loop."""

    def time_ms(self) -> int:
        return int(time.time() * 1000)

    def monotonic(self) -> float:
        return time.monotonic()

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        return asyncio.get_running_loop().call_later(delay_s, callback, *args)

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)


SYSTEM_CLOCK = SystemClock()


class _ManualTimer:
    __slots__ = ("args", "callback", "cancelled", "due")

    def __init__(self, due: int, callback: Callable[..., Any], args: tuple[Any, ...]):
        self.due = due
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that only moves through ``advance`` (Kafka's ``MockTime``).

    ``advance(ms)`` steps through the due timers in order, setting the time to each
    timer's due time before running it, so a callback sees the time it was due at, and
    timers scheduled by callbacks run too when they fall inside the step.
    ``await settle()`` lets the tasks woken by ``advance`` run before a test looks.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000, monotonic_s: float = 1_000.0):
        # Integer nanoseconds: sums of float seconds drift, and a timer due at exactly
        # the time a test advances to must run.
        self._start_ms = start_ms
        self._start_ns = round(monotonic_s * 1e9)
        self._now_ns = self._start_ns
        self._timers: list[tuple[int, int, _ManualTimer]] = []
        self._sequence = itertools.count()

    def time_ms(self) -> int:
        return self._start_ms + (self._now_ns - self._start_ns) // 1_000_000

    def monotonic(self) -> float:
        return self._now_ns / 1e9

    def call_later(self, delay_s: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        if delay_s <= 0:
            # Due now: runs on the loop's next turn, as asyncio's call_later(0) does.
            return asyncio.get_running_loop().call_soon(callback, *args)
        timer = _ManualTimer(self._now_ns + round(delay_s * 1e9), callback, args)
        heapq.heappush(self._timers, (timer.due, next(self._sequence), timer))
        return timer

    async def sleep(self, delay_s: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(delay_s, _wake, future)
        try:
            await future
        finally:
            timer.cancel()

    def advance(self, ms: float) -> None:
        """Move time forward by ``ms`` milliseconds, running every timer due meanwhile."""
        end = self._now_ns + round(ms * 1e6)
        while self._timers and self._timers[0][0] <= end:
            due, _seq, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            self._now_ns = max(self._now_ns, due)
            timer.callback(*timer.args)
        self._now_ns = end

    def pending_timers(self) -> int:
        """Timers scheduled and not cancelled (visible for testing)."""
        return sum(1 for _due, _seq, timer in self._timers if not timer.cancelled)

    async def settle(self, rounds: int = 10) -> None:
        """Let woken tasks run: a few turns of the event loop, no time passes."""
        for _ in range(rounds):
            await asyncio.sleep(0)

    async def tick(self, ms: float, rounds: int = 10) -> None:
        """``settle``, ``advance``, ``settle``: work already started runs at the current
        time, then time moves and what it woke runs. What most async tests want."""
        await self.settle(rounds)
        self.advance(ms)
        await self.settle(rounds)


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
