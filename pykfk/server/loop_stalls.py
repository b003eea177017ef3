"""The loop-stall monitor: what stops the broker's event loop, and for how long.

Off unless ``PYKFK_LOOP_STALL_MS`` names a threshold in milliseconds (``bench.latency``
sets it); ``PYKFK_LOOP_STALLS`` is the JSON file it keeps up to date (once a second and
at stop). Works on uvloop as on asyncio's own loop, without wrapping their callbacks:

- a tick on the loop every ``TICK_S`` measures how late it ran: a tick late by more than
  the threshold is a stall of that length;
- while the loop is late the loop thread's Python stack is sampled, so a stall is named
  by what ran: the callback or task at the bottom of the stack (the first frame above the
  loop) and the innermost frame at the time. When the loop runs in the main thread and
  SIGALRM is free, each tick pushes a one-shot ``ITIMER_REAL`` timer half a threshold
  past the next tick: it fires only while the loop is late, and its handler runs in the
  loop thread and reads the frame it interrupted. Nothing wakes while nothing stalls (a
  polling thread cost the broker about 400 wakeups a second, and a handover of the
  interpreter lock each). Otherwise (a loop in another thread, SIGALRM taken, as by
  pytest-timeout) a watchdog thread polls every half tick and reads the loop thread's
  stack with ``sys._current_frames``;
- ``gc.callbacks`` time every collection, with its generation; a stall overlapping a
  collection says so (a collection holds the interpreter lock, so the watchdog cannot
  sample it: the gc record is the name then).

On Linux each stall is split by the loop thread's scheduler statistics into its own CPU
time, its wait for a CPU (load from other processes) and the rest (asleep in a system
call: disk writes, fsync): the CPU part is the broker's own, whatever the machine's load.

The report: histograms of stall lengths and of the loop's CPU time within them, the
stalls grouped by name (count, total, longest), the worst stalls one by one, and the
collections by generation.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import inspect
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

STALL_MS_ENV = "PYKFK_LOOP_STALL_MS"
REPORT_ENV = "PYKFK_LOOP_STALLS"
# How often the loop is ticked; a stall shorter than this may go unseen.
TICK_S = 0.005
# Stall lengths are counted in these buckets (ms, upper bounds; the last is open).
BUCKETS_MS = (5, 10, 20, 50, 100, 200, 500, 1000)
WORST_KEPT = 50
REPORT_INTERVAL_S = 1.0  # the report file is rewritten this often (by a thread: 1 wakeup a second)
NO_CALLBACK = "<loop, no Python callback>"
# A stall names the innermost frames, up to this many.
STACK_DEPTH = 4


def _name(frame: FrameType) -> str:
    code = frame.f_code
    return str(getattr(code, "co_qualname", code.co_name))  # co_qualname: Python 3.11+


def _where(frame: FrameType) -> str:
    return f"{_name(frame)} ({_short_path(frame.f_code.co_filename)}:{frame.f_lineno})"


def _short_path(path: str) -> str:
    parts = path.split(os.sep)
    return os.sep.join(parts[-2:])


def loop_runner_code(frame: FrameType | None) -> CodeType | None:
    """The code that runs the loop (``Runner.run``, or whatever called
    ``run_until_complete``), seen from a frame inside a task: what the outermost
    coroutine frame was called from."""
    runner = None
    while frame is not None:
        if frame.f_code.co_flags & inspect.CO_COROUTINE and frame.f_back is not None:
            runner = frame.f_back.f_code
        frame = frame.f_back
    return runner


def describe_stack(frame: FrameType | None, runner: CodeType | None) -> tuple[str, str]:
    """(the callback or task that runs, the innermost frame) of the loop thread's stack;
    the callback is the frame right above the loop's ``runner``."""
    if frame is None:
        return NO_CALLBACK, "<none>"
    innermost = frame
    callers: list[FrameType] = []
    while frame is not None and len(callers) < STACK_DEPTH:
        callers.append(frame)
        frame = frame.f_back
    frame = innermost
    callback = None
    while frame is not None:
        if frame.f_back is not None and frame.f_back.f_code is runner:
            callback = frame
        frame = frame.f_back
    if callback is None:
        # No Python callback runs: the loop is in its own C code or a system call, or
        # the thread waits for a CPU.
        return NO_CALLBACK, _where(innermost)
    # The innermost frames, innermost first, down to the callback.
    at = []
    for f in callers:
        at.append(_where(f))
        if f is callback:
            break
    return _name(callback), " < ".join(at)


class LoopStallMonitor:
    """Records every stretch over ``threshold_ms`` in which the loop ran no tick."""

    def __init__(self, threshold_ms: float, report_path: str | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.threshold_s = threshold_ms / 1000
        self.report_path = report_path
        self.clock = clock
        self.buckets = [0] * (len(BUCKETS_MS) + 1)
        self.cpu_buckets = [0] * (len(BUCKETS_MS) + 1)  # the loop thread's own CPU in each stall
        self.by_name: dict[str, list[float]] = {}  # name -> [count, total ms, max ms]
        self.worst: list[dict[str, Any]] = []
        self.gc_by_generation: dict[int, list[float]] = {}  # gen -> [count, total ms, max ms]
        self.gc_pauses: collections.deque[tuple[float, float, int]] = collections.deque(maxlen=256)
        self.stall_count = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id = 0
        self._expected = 0.0  # when the next tick is due
        self._handle: asyncio.TimerHandle | None = None
        self._runner: CodeType | None = None
        self._samples: collections.Counter[tuple[str, str]] = collections.Counter()
        # Stacks sampled by the SIGALRM handler in the loop thread; no lock: the handler
        # runs between bytecodes of that same thread, and only appends.
        self._signal_samples: list[tuple[str, str]] = []
        self._use_signal = False
        self._previous_handler: Any = None
        self._armed_s = 0.0  # the one-shot timer's delay
        self._gc_started = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started_at = 0.0
        self._schedstat_fd = -1
        self._last_sched = (0, 0)  # the loop thread's (CPU ns, run-queue wait ns) at the last tick

    @classmethod
    def from_environment(cls) -> LoopStallMonitor | None:
        threshold = os.environ.get(STALL_MS_ENV)
        if not threshold:
            return None
        return cls(float(threshold), os.environ.get(REPORT_ENV) or None)

    # -- lifecycle --------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._loop_thread_id = threading.get_ident()
        self._runner = loop_runner_code(sys._getframe())
        self._started_at = self.clock()
        try:  # Linux: the loop thread's own CPU time and time spent waiting for a CPU
            self._schedstat_fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._schedstat_fd = -1
        self._last_sched = self._sched()
        self._use_signal = self._install_signal_sampler()
        self._schedule_tick()
        gc.callbacks.append(self._on_gc)
        target = self._write_reports if self._use_signal else self._watch
        self._thread = threading.Thread(target=target, name="pykfk-loop-stalls", daemon=True)
        self._thread.start()

    def _install_signal_sampler(self) -> bool:
        """Sample the loop's stack from SIGALRM when the loop runs in the main thread and
        nothing else handles SIGALRM; False: the watchdog thread samples instead."""
        if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
            return False
        try:
            if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, None):
                return False
            if signal.getitimer(signal.ITIMER_REAL)[0] > 0:
                return False  # someone's alarm is pending
            self._previous_handler = signal.signal(signal.SIGALRM, self._on_alarm)
            # Restart system calls the signal interrupts (SA_RESTART): other threads'
            # reads and writes, and compiled code that does not retry on EINTR.
            signal.siginterrupt(signal.SIGALRM, False)
        except (ValueError, OSError):
            return False
        # First sample half a threshold after the tick is late (as the watchdog did), then
        # every half threshold while it stays late.
        self._armed_s = TICK_S + self.threshold_s / 2
        return True

    def _on_alarm(self, _signum: int, frame: FrameType | None) -> None:
        """In the loop thread, between two bytecodes of whatever holds it up."""
        self._signal_samples.append(describe_stack(frame, self._runner))
        del frame

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        if self._use_signal:
            self._use_signal = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            try:
                signal.signal(signal.SIGALRM, self._previous_handler if self._previous_handler is not None
                              else signal.SIG_DFL)
            except ValueError:  # stopped from another thread: the alarm is off, the handler stays
                pass
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.write_report()
        if self._schedstat_fd >= 0:
            os.close(self._schedstat_fd)
            self._schedstat_fd = -1

    # -- the loop side ----------------------------------------------------------------

    def _schedule_tick(self) -> None:
        assert self._loop is not None
        self._expected = self.clock() + TICK_S
        self._handle = self._loop.call_later(TICK_S, self._tick)
        if self._use_signal:
            # A dead man's switch: it fires only if the next tick is half a threshold late.
            signal.setitimer(signal.ITIMER_REAL, self._armed_s, self.threshold_s / 2)

    def _sched(self) -> tuple[int, int]:
        if self._schedstat_fd < 0:
            return 0, 0
        try:
            fields = os.pread(self._schedstat_fd, 128, 0).split()
            return int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):
            return 0, 0

    def _tick(self) -> None:
        now = self.clock()
        late = now - self._expected
        sched = self._sched()
        if late > self.threshold_s:
            cpu_ms = (sched[0] - self._last_sched[0]) / 1e6
            waiting_ms = (sched[1] - self._last_sched[1]) / 1e6
            self._record(late, now, cpu_ms, waiting_ms)
        self._last_sched = sched
        self._schedule_tick()

    def _record(self, late_s: float, now: float, cpu_ms: float = 0.0, waiting_ms: float = 0.0) -> None:
        with self._lock:
            samples, self._samples = self._samples, collections.Counter()
        if self._signal_samples:
            taken, self._signal_samples = self._signal_samples, []
            samples.update(taken)
        start = now - late_s
        try:
            pauses = list(self.gc_pauses)
        except RuntimeError:  # a collection (its callback) appended while it was copied
            pauses = []
        overlapping = [(d, g) for (t, d, g) in pauses if t + d / 1000 >= start]
        gc_ms = sum(d for d, _g in overlapping)
        gcs = [g for _d, g in overlapping]
        if samples:
            (name, at), _n = samples.most_common(1)[0]
        elif gcs:
            name, at = f"gc generation {max(gcs)}", "gc"
        else:
            name, at = "<not sampled>", "<not sampled>"
        ms = late_s * 1000
        # Of the stall (and the tick interval before it): the loop thread's own CPU time,
        # its wait for a CPU (other processes' load), and the rest asleep in the kernel.
        blocked_ms = max(ms + TICK_S * 1000 - cpu_ms - waiting_ms, 0.0)
        stall = {"ms": round(ms, 2), "name": name, "at": at, "gc_ms": round(gc_ms, 2),
                 "cpu_ms": round(cpu_ms, 2), "runqueue_ms": round(waiting_ms, 2), "blocked_ms": round(blocked_ms, 2),
                 "at_s": round(start - self._started_at, 3),
                 "sampled": {f"{n} @ {a}": c for (n, a), c in samples.most_common(3)}}
        with self._lock:  # the watchdog thread writes the report
            self.stall_count += 1
            self.buckets[_bucket(ms)] += 1
            self.cpu_buckets[_bucket(cpu_ms)] += 1
            entry = self.by_name.setdefault(name, [0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += ms
            entry[2] = max(entry[2], ms)
            self.worst.append(stall)
            if len(self.worst) > 2 * WORST_KEPT:
                self.worst.sort(key=lambda e: -e["ms"])
                del self.worst[WORST_KEPT:]

    # -- gc ---------------------------------------------------------------------------

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = self.clock()
            return
        ms = (self.clock() - self._gc_started) * 1000
        generation = info.get("generation", -1)
        entry = self.gc_by_generation.setdefault(generation, [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += ms
        entry[2] = max(entry[2], ms)
        if ms >= 1.0:
            self.gc_pauses.append((self._gc_started, ms, generation))

    # -- the watchdog thread ----------------------------------------------------------

    def _write_reports(self) -> None:
        while not self._stop.wait(REPORT_INTERVAL_S):
            if self.report_path is not None:
                self.write_report()

    def _watch(self) -> None:
        next_report = self.clock() + REPORT_INTERVAL_S
        while not self._stop.wait(TICK_S / 2):
            now = self.clock()
            if now - self._expected > self.threshold_s / 2:
                frame = sys._current_frames().get(self._loop_thread_id)
                sample = describe_stack(frame, self._runner)
                del frame
                with self._lock:
                    self._samples[sample] += 1
            if self.report_path is not None and now >= next_report:
                next_report = now + REPORT_INTERVAL_S
                self.write_report()

    # -- the report -------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        labels = [f"<={b} ms" for b in BUCKETS_MS] + [f">{BUCKETS_MS[-1]} ms"]
        with self._lock:
            worst = sorted(self.worst, key=lambda e: -e["ms"])[:WORST_KEPT]
            by_name = [(n, list(v)) for n, v in self.by_name.items()]
            buckets, cpu_buckets, stalls = list(self.buckets), list(self.cpu_buckets), self.stall_count
        collections_by_generation = [(g, list(v)) for g, v in list(self.gc_by_generation.items())]
        return {
            "threshold_ms": self.threshold_s * 1000,
            "stalls": stalls,
            "histogram": dict(zip(labels, buckets, strict=True)),
            "cpu_histogram": dict(zip(labels, cpu_buckets, strict=True)),
            "by_name": sorted(({"name": n, "count": int(c), "total_ms": round(t, 2), "max_ms": round(m, 2)}
                               for n, (c, t, m) in by_name), key=lambda e: -e["max_ms"]),
            "worst": worst,
            "gc": {str(g): {"count": int(c), "total_ms": round(t, 2), "max_ms": round(m, 2)}
                   for g, (c, t, m) in sorted(collections_by_generation)},
        }

    def write_report(self) -> None:
        if self.report_path is None:
            return
        tmp = f"{self.report_path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.report(), f, indent=1)
        os.replace(tmp, self.report_path)


def _bucket(ms: float) -> int:
    for i, bound in enumerate(BUCKETS_MS):
        if ms <= bound:
            return i
    return len(BUCKETS_MS)
