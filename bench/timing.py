"""Best-of timing for the micro benches that report their own ratios (beside
pytest-benchmark's table): a function's seconds per call, and the best of several rounds
for a set of functions measured in turn, so drift on a shared machine hits them alike."""

from __future__ import annotations

import time
from collections.abc import Callable


def seconds_per_call(function: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls


def best_of_rounds(functions: dict[str, Callable[[], object]], rounds: int, calls: int) -> dict[str, float]:
    """name -> best seconds per call over ``rounds``, after one warm-up pass of each."""
    best = dict.fromkeys(functions, float("inf"))
    for function in functions.values():
        seconds_per_call(function, calls)
    for _ in range(rounds):
        for name, function in functions.items():
            best[name] = min(best[name], seconds_per_call(function, calls))
    return best
