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
    core._set_gil_release_bytes(nbytes)
    try:
        return function()
    finally:
        core._set_gil_release_bytes(None)


def _throughput_beside_busy_thread(data: bytes, budget_s: float) -> float:
    """GB/s of back-to-back crc32c calls while another thread runs Python non-stop."""
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    spinner = threading.Thread(target=busy, daemon=True)
    spinner.start()
    try:
        time.sleep(0.01)  # let it start asking for the GIL
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < budget_s or calls == 0:
            core.crc32c(data)
            calls += 1
    finally:
        stop.set()
        spinner.join(timeout=10)
    return calls * len(data) / elapsed / 1e9


@pytest.mark.parametrize("size", [4096, 65536, 262144, MIB, 4 * MIB])
def test_gil_release_cost(benchmark, report, size: int) -> None:  # type: ignore[no-untyped-def]
    """What releasing the GIL costs the caller, alone and beside a CPU-bound Python thread.

    Alone, a release is a pair of atomic operations (+tens of ns per call). Beside a thread
    running Python, every release can hand that thread the GIL, and the caller then waits
    up to sys.getswitchinterval() (5 ms) to get it back; holding it instead delays the
    other thread by the CRC time only. GIL_RELEASE_BYTES is set from these figures.
    """
    rounds, calls = _effort(benchmark)
    data = DATA[:size] if size <= MIB else DATA * (size // MIB)

    def per_call() -> float:
        return min(_seconds_per_call(core.crc32c, data, calls) for _ in range(rounds))

    held = _with_threshold(1 << 62, per_call)
    released = _with_threshold(0, per_call)
    budget_s = 0.001 if calls == 2 else 0.2
    busy_held = _with_threshold(1 << 62, lambda: _throughput_beside_busy_thread(data, budget_s))
    busy_released = _with_threshold(0, lambda: _throughput_beside_busy_thread(data, budget_s))
    benchmark.extra_info.update(
        held_us=held * 1e6, released_us=released * 1e6,
        busy_thread_held_gb_s=busy_held, busy_thread_released_gb_s=busy_released,
    )
    report(
        f"{size:>8} B: alone {held * 1e6:.2f} us held, {released * 1e6:.2f} us released "
        f"(+{(released - held) * 1e9:.0f} ns); beside a busy thread {busy_held:.1f} GB/s held, "
        f"{busy_released:.1f} GB/s released"
    )
    benchmark(core.crc32c, data)
