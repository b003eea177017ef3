"""Throughput of pykfk._core.crc against its baselines: the crc32c package and zlib.crc32.

    python -m pytest bench/bench_crc32.py                       # figures + pytest-benchmark table
    python -m pytest bench/bench_crc32.py --benchmark-disable   # one quick pass (CI smoke)

Every comparison times ours and the baseline in the same run, interleaved and best-of-N
(the machine is shared, so the minimum is the figure least disturbed by other work), and
prints pykfk, the pure-Python reference and the baseline side by side.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Callable

import crc32c as crc32c_pkg
import pytest

import pykfk._core.crc as core
import pykfk._reference.crc as reference

MIB = 1 << 20
DATA = random.Random(0xC0FFEE).randbytes(MIB)
# The bit-at-a-time reference manages ~1 MB/s; a small input keeps it to a few ms.
REFERENCE_BYTES = 4096


def _seconds_per_call(function: Callable[..., int], data: bytes, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function(data)
    return (time.perf_counter() - start) / calls


def _best_rates(
    functions: dict[str, Callable[..., int]], data: bytes, rounds: int, calls: int
) -> dict[str, float]:
    """Best GB/s of each function over `rounds`, the functions taking turns every round."""
    best = dict.fromkeys(functions, float("inf"))
    for function in functions.values():  # warm caches, branch predictors and clocks first
        _seconds_per_call(function, data, calls)
    for _ in range(rounds):
        for name, function in functions.items():
            best[name] = min(best[name], _seconds_per_call(function, data, calls))
    return {name: len(data) / seconds / 1e9 for name, seconds in best.items()}


def _effort(benchmark: object) -> tuple[int, int]:
    """(rounds, calls per round): a token pass under --benchmark-disable."""
    return (2, 2) if getattr(benchmark, "disabled", False) else (60, 40)


def _reference_rate(function: Callable[..., int]) -> float:
    data = DATA[:REFERENCE_BYTES]
    return REFERENCE_BYTES / _seconds_per_call(function, data, 1) / 1e9


def _compare(benchmark, report, name: str, ours, baseline_name: str, baseline, reference_fn,
             target: float) -> None:  # type: ignore[no-untyped-def]
    rounds, calls = _effort(benchmark)
    rates = _best_rates({"pykfk": ours, baseline_name: baseline}, DATA, rounds, calls)
    ratio = rates["pykfk"] / rates[baseline_name]
    reference_rate = _reference_rate(reference_fn)
    benchmark.extra_info.update(
        pykfk_gb_s=round(rates["pykfk"], 2),
        baseline=baseline_name,
        baseline_gb_s=round(rates[baseline_name], 2),
        ratio=round(ratio, 2),
        reference_gb_s=reference_rate,
    )
    report(
        f"{name} of 1 MiB: pykfk {rates['pykfk']:.1f} GB/s | reference (pure Python, "
        f"{REFERENCE_BYTES} B) {reference_rate * 1e3:.2f} MB/s | {baseline_name} "
        f"{rates[baseline_name]:.1f} GB/s | ratio {ratio:.2f}x (target >= {target}x) "
        f"[features: {','.join(sorted(core.hardware_features())) or 'none'}]"
    )
    assert ours(DATA) == baseline(DATA)
    benchmark(ours, DATA)


@pytest.mark.benchmark(group="crc32c-1MiB")
def test_crc32c_vs_crc32c_package(benchmark, report) -> None:  # type: ignore[no-untyped-def]
    _compare(benchmark, report, "CRC-32C", core.crc32c, "crc32c package", crc32c_pkg.crc32c,
             reference.crc32c, target=1.0)


@pytest.mark.benchmark(group="crc32-1MiB")
def test_crc32_vs_zlib(benchmark, report) -> None:  # type: ignore[no-untyped-def]
    _compare(benchmark, report, "CRC-32", core.crc32, "zlib.crc32", zlib.crc32,
             reference.crc32, target=4.0)


# pytest-benchmark rows for the baselines and the table path, next to ours above.
@pytest.mark.benchmark(group="crc32c-1MiB")
@pytest.mark.parametrize(
    "function",
    [pytest.param(crc32c_pkg.crc32c, id="crc32c-package"),
     pytest.param(core.crc32c_portable, id="pykfk-portable")],
)
def test_crc32c_baselines(benchmark, function) -> None:  # type: ignore[no-untyped-def]
    benchmark(function, DATA)


@pytest.mark.benchmark(group="crc32-1MiB")
@pytest.mark.parametrize(
    "function",
    [pytest.param(zlib.crc32, id="zlib"), pytest.param(core.crc32_portable, id="pykfk-portable")],
)
def test_crc32_baselines(benchmark, function) -> None:  # type: ignore[no-untyped-def]
    benchmark(function, DATA)


@pytest.mark.parametrize("size", [16, 64, 256, 1024, 4096, 16384, 65536, MIB])
def test_crc_sizes(benchmark, report, size: int) -> None:  # type: ignore[no-untyped-def]
    """GB/s per call size, Python call overhead included: where acceleration starts to pay."""
    rounds, calls = _effort(benchmark)
    data = DATA[:size]
    calls = max(calls, calls * 4096 // size) if calls > 2 else calls
    rates = _best_rates(
        {
            "crc32c": core.crc32c,
            "crc32c package": crc32c_pkg.crc32c,
            "crc32c portable": core.crc32c_portable,
            "crc32": core.crc32,
            "zlib.crc32": zlib.crc32,
            "crc32 portable": core.crc32_portable,
        },
        data, rounds, calls,
    )
    benchmark.extra_info.update({name: round(rate, 2) for name, rate in rates.items()})
    report(f"{size:>8} B: " + ", ".join(f"{name} {rate:.2f}" for name, rate in rates.items())
           + " GB/s")
    benchmark(core.crc32c, data)


# --- GIL release threshold ---------------------------------------------------------------


def _with_threshold(nbytes: int, function: Callable[[], float]) -> float:
    previous = core._set_gil_release_bytes(nbytes)
    try:
        return function()
    finally:
        core._set_gil_release_bytes(previous)


def _call_times(data: bytes, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        core.crc32c(data)
        times.append(time.perf_counter() - start)
    return sorted(times)


@pytest.mark.parametrize("size", [4096, 16384, 65536, 262144, MIB])
def test_gil_release_cost(benchmark, report, size: int) -> None:  # type: ignore[no-untyped-def]
    """What releasing the GIL adds to a call, alone and with a busy Python thread around.

    Uncontended, a release is a pair of atomic operations (the best-of figures). With a
    thread running Python alongside, a release that lasts longer than that thread takes to
    wake up hands it the GIL, and the caller waits up to sys.getswitchinterval() to get it
    back (the max figures). GIL_RELEASE_BYTES sits where the first cost is lost in the CRC
    time and well below where the second starts.
    """
    rounds, calls = _effort(benchmark)
    data = DATA[:size]

    def per_call() -> float:
        return min(_seconds_per_call(core.crc32c, data, calls) for _ in range(rounds))

    held = _with_threshold(1 << 62, per_call)
    released = _with_threshold(0, per_call)

    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=busy, daemon=True)
    spinner.start()
    try:
        samples = 5 * rounds
        contended_held = _with_threshold(1 << 62, lambda: _call_times(data, samples))
        contended_released = _with_threshold(0, lambda: _call_times(data, samples))
    finally:
        stop.set()
        spinner.join(timeout=10)
    benchmark.extra_info.update(
        held_us=held * 1e6, released_us=released * 1e6,
        busy_thread_max_held_us=contended_held[-1] * 1e6,
        busy_thread_max_released_us=contended_released[-1] * 1e6,
    )
    report(
        f"{size:>8} B: GIL held {held * 1e6:.2f} us, released {released * 1e6:.2f} us "
        f"(+{(released - held) * 1e9:.0f} ns); with a busy thread, median/max: held "
        f"{contended_held[len(contended_held) // 2] * 1e6:.1f}/{contended_held[-1] * 1e6:.0f} us, "
        f"released {contended_released[len(contended_released) // 2] * 1e6:.1f}/"
        f"{contended_released[-1] * 1e6:.0f} us"
    )
    benchmark(core.crc32c, data)
