"""Percentiles, CPU per request and per record, the table and the plot."""

from __future__ import annotations

import argparse
from typing import Any

PERCENTILES = (50, 99, 99.9)


def percentile_ms(sorted_ns: list[int], p: float) -> float:
    if not sorted_ns:
        return float("nan")
    index = min(len(sorted_ns) - 1, max(0, round(p / 100 * len(sorted_ns)) - 1))
    return sorted_ns[index] / 1e6


def _latency(values: list[int]) -> dict[str, float]:
    ordered = sorted(values)
    out = {f"p{p:g}_ms": percentile_ms(ordered, p) for p in PERCENTILES}
    out["max_ms"] = ordered[-1] / 1e6 if ordered else float("nan")
    return out


def request_rate(samples: list[list[int]], window: list[int], column: int = 1) -> float:
    """Requests per second from cumulative (time, count...) samples inside the window;
    ``column`` picks the count (1: all requests, 2: Produce, 3: Fetch)."""
    inside = [s for s in samples if window[0] <= s[0] <= window[1]]
    if len(inside) < 2:
        return float("nan")
    first, last = inside[0], inside[-1]
    return (last[column] - first[column]) / ((last[0] - first[0]) / 1e9)


def summarize(target: str, args: argparse.Namespace, producer: dict[str, Any],
              consumer: dict[str, Any], broker_cpu: tuple[float, float] | None) -> dict[str, Any]:
    """``broker_cpu``: the broker's CPU seconds per second in all and in the kernel."""
    window = producer["window"]
    requests = request_rate(producer["requests"], window) + request_rate(consumer["requests"], window)
    achieved = len(producer["ack_ns"]) / args.seconds
    result: dict[str, Any] = {
        "target": target, "rate": args.rate, "achieved_rate": achieved,
        "partitions": consumer["partitions"], "failed": producer["failed"],
        "end_to_end": _latency(consumer["end_to_end_ns"]), "ack": _latency(producer["ack_ns"]),
        "requests_per_s": requests,
        "produce_requests_per_s": request_rate(producer["requests"], window, 2),
        "fetch_requests_per_s": request_rate(consumer["requests"], window, 3),
        "_end_to_end_ns": consumer["end_to_end_ns"], "_ack_ns": producer["ack_ns"],
    }
    if broker_cpu is not None:
        cpu, kernel = broker_cpu
        result["broker_cpu_percent"] = cpu * 100
        result["broker_cpu_us_per_request"] = cpu / requests * 1e6
        # The system calls' share: what the request's recv, append, send and wakeups cost
        # in the kernel, which no broker code avoids.
        result["broker_kernel_us_per_request"] = kernel / requests * 1e6
        result["broker_cpu_us_per_record"] = cpu / achieved * 1e6
    return result


# The target for the broker's CPU per request, as a multiple of the floor's (issue 26).
FLOOR_RATIO_TARGET = 2.0


def add_floor(result: dict[str, Any], floor: dict[str, float]) -> None:
    """The floor's figures (``bench.latency.floor.measure``) and the broker's CPU per
    request as a multiple of the floor's."""
    result["floor"] = floor
    if "broker_cpu_us_per_request" in result and floor["cpu_us_per_request"] > 0:
        result["cpu_ratio_to_floor"] = result["broker_cpu_us_per_request"] / floor["cpu_us_per_request"]
        result["cpu_ratio_target"] = FLOOR_RATIO_TARGET


def print_table(results: list[dict[str, Any]]) -> None:
    print()
    header = f"{'':8} {'rate':>8} {'e2e p50':>8} {'p99':>7} {'p99.9':>7} {'max':>7} " \
             f"{'ack p50':>8} {'p99':>7} {'req/s':>7} {'CPU%':>6} {'us/req':>7} {'kernel':>7} {'us/rec':>7}"
    print(header)
    for r in results:
        e, a = r["end_to_end"], r["ack"]
        cpu = (f"{r['broker_cpu_percent']:6.1f} {r['broker_cpu_us_per_request']:7.1f} "
               f"{r['broker_kernel_us_per_request']:7.1f} {r['broker_cpu_us_per_record']:7.1f}") \
            if "broker_cpu_percent" in r else f"{'-':>6} {'-':>7} {'-':>7} {'-':>7}"
        print(f"{r['target']:8} {r['achieved_rate']:8.0f} {e['p50_ms']:8.2f} {e['p99_ms']:7.2f} "
              f"{e['p99.9_ms']:7.2f} {e['max_ms']:7.1f} {a['p50_ms']:8.2f} {a['p99_ms']:7.2f} "
              f"{r['requests_per_s']:7.0f} {cpu}")
    for r in results:
        print(f"{r['target']}: {r['produce_requests_per_s']:.0f} Produce and "
              f"{r['fetch_requests_per_s']:.0f} Fetch requests/s")
    print("latencies in ms; CPU is the broker's (the mock runs inside the producer), "
          "kernel the part of us/req spent in system calls")
    for r in results:
        floor = r.get("floor")
        if floor is None:
            continue
        ratio = r.get("cpu_ratio_to_floor", float("nan"))
        verdict = "met" if ratio <= FLOOR_RATIO_TARGET else "not met"
        print(f"{'floor':8} {floor['requests_per_s']:8.0f} requests/s (C server, same run): "
              f"{floor['cpu_us_per_request']:.1f} us/req, kernel {floor['kernel_us_per_request']:.1f} "
              f"(kernel share sampled over {floor['ticks']:.0f} ticks)")
        print(f"{r['target']}: broker CPU per request {r['broker_cpu_us_per_request']:.1f} us = "
              f"{ratio:.2f}x the floor's {floor['cpu_us_per_request']:.1f} us "
              f"(target <= {FLOOR_RATIO_TARGET:g}x: {verdict})")


def print_stalls(results: list[dict[str, Any]], worst: int = 8) -> None:
    """The broker's loop-stall histogram and what blocked its loop longest (the stalls
    are the broker's own, whatever the load on the machine adds to the latencies)."""
    for r in results:
        stalls = r.get("loop_stalls")
        if stalls is None:
            continue
        print(f"\n{r['target']}: {stalls['stalls']} event-loop stalls over {stalls['threshold_ms']:g} ms "
              f"(whole run, start-up included)")
        print("  length:         " + "  ".join(f"{label}: {count}" for label, count in stalls["histogram"].items()))
        print("  loop's own CPU: " + "  ".join(f"{label}: {count}" for label, count in stalls["cpu_histogram"].items()))
        print("  longest by what ran (count, total ms, max ms):")
        for entry in stalls["by_name"][:worst]:
            print(f"    {entry['max_ms']:7.1f} {entry['total_ms']:8.1f} {entry['count']:5d}  {entry['name']}")
        print("  worst stalls (ms; of it the loop's CPU, waiting for a CPU, asleep in the kernel, gc; "
              "what ran @ innermost frame):")
        for stall in stalls["worst"][:worst]:
            print(f"    {stall['ms']:7.1f}  cpu {stall['cpu_ms']:5.1f} runq {stall['runqueue_ms']:5.1f} "
                  f"sleep {stall['blocked_ms']:5.1f} gc {stall['gc_ms']:5.1f}  t={stall['at_s']:.1f}s  "
                  f"{stall['name']} @ {stall['at']}")
        print("  collections: " + ", ".join(f"gen {g}: {c['count']} x, total {c['total_ms']:.0f} ms, "
                                            f"max {c['max_ms']:.1f} ms" for g, c in stalls["gc"].items()))


def plot(results: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=False)
    for ax, key, title in ((axes[0], "_end_to_end_ns", "end-to-end"), (axes[1], "_ack_ns", "ack")):
        for r in results:
            values = sorted(r[key])
            if not values:
                continue
            n = len(values)
            # Percentile plot on a log "nines" axis: x = 1 / (1 - quantile).
            xs = [1 / (1 - (i + 0.5) / n) for i in range(n)]
            ax.plot(xs, [v / 1e6 for v in values], label=f"{r['target']} ({r['achieved_rate']:,.0f}/s)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks([2, 10, 100, 1000, 10000])
        ax.set_xticklabels(["p50", "p90", "p99", "p99.9", "p99.99"])
        ax.set_ylabel("latency (ms)")
        ax.set_title(f"{title} latency, 1 KiB records, acks=all")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    ratios = [f"{r['target']} CPU/request {r['cpu_ratio_to_floor']:.2f}x the floor's "
              f"({r['broker_cpu_us_per_request']:.1f} vs {r['floor']['cpu_us_per_request']:.1f} us; "
              f"target <= {FLOOR_RATIO_TARGET:g}x)" for r in results if "cpu_ratio_to_floor" in r]
    if ratios:
        fig.suptitle("; ".join(ratios), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
