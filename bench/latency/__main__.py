"""python -m bench.latency [--rate 20000] [--seconds 20] [--target pykfk|mock|both] [--no-floor]

After the broker's run, the same run measures ``bench.latency.floor`` (a minimal C server
doing a request's system calls) at the request rate the broker saw, and reports the
broker's CPU per request as a ratio to the floor's (the target is <= 2.0x)."""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.latency import floor
from bench.latency.report import add_floor, plot, print_stalls, print_table, summarize
from bench.scale.probes import user_and_kernel_cpu_seconds
from pykfk.server.loop_stalls import REPORT_ENV, STALL_MS_ENV
from pykfk.testing import BrokerProcess

TOPIC = "latency"
START_DELAY_S = 1.0
FLOOR_DEFAULT_RATE = 7000.0  # bench.latency.floor's own default


def _worker(role: str, bootstrap: str, run_dir: str, args: argparse.Namespace,
            mock: bool) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "bench.latency.workers", role, "--bootstrap", bootstrap,
               "--topic", TOPIC, "--rate", str(args.rate), "--seconds", str(args.seconds),
               "--warmup", str(args.warmup), "--run-dir", run_dir]
    return subprocess.Popen(command + (["--mock"] if mock else []), cwd=Path(__file__).parents[2])


def _create_topic(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)


def _wait(path: str, procs: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"a worker exited with {proc.returncode} before {path}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(0.01)


def run_once(target: str, args: argparse.Namespace, workdir: str) -> dict[str, Any]:
    run_dir = os.path.join(workdir, target)
    os.makedirs(run_dir)
    mock = target == "mock"
    broker = None
    stalls_path = os.path.join(run_dir, "loop-stalls.json")
    if not mock and args.stall_ms > 0:
        # The broker's loop-stall monitor (pykfk.server.loop_stalls) reports what blocked its
        # event loop; the broker process inherits these.
        os.environ[STALL_MS_ENV] = str(args.stall_ms)
        os.environ[REPORT_ENV] = stalls_path
        try:
            broker = BrokerProcess(os.path.join(run_dir, "data"), log_level="WARNING").start()
        finally:
            os.environ.pop(STALL_MS_ENV, None)
            os.environ.pop(REPORT_ENV, None)
    elif not mock:
        broker = BrokerProcess(os.path.join(run_dir, "data"), log_level="WARNING").start()
    if broker is not None:
        _create_topic(broker.bootstrap, args.partitions)
    bootstrap = broker.bootstrap if broker else "127.0.0.1:1"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_worker("producer", bootstrap, run_dir, args, mock))
        procs.append(_worker("consumer", bootstrap, run_dir, args, mock))
        _wait(os.path.join(run_dir, "ready"), procs, 120)
        start = time.monotonic_ns() + int(START_DELAY_S * 1e9)
        # Written whole, then renamed: a worker polling for "go" never reads it half written.
        with open(os.path.join(run_dir, "go.tmp"), "w", encoding="ascii") as f:
            f.write(str(start))
        os.rename(os.path.join(run_dir, "go.tmp"), os.path.join(run_dir, "go"))
        cpu = _broker_cpu_in_window(broker, start, args) if broker else None
        for proc in procs:
            if proc.wait(args.seconds + args.warmup + 120) != 0:
                raise RuntimeError(f"a worker failed with exit code {proc.returncode}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        if broker is not None:
            broker.stop()
    with open(os.path.join(run_dir, "producer.json"), encoding="ascii") as f:
        producer = json.load(f)
    with open(os.path.join(run_dir, "consumer.json"), encoding="ascii") as f:
        consumer = json.load(f)
    result = summarize(target, args, producer, consumer, cpu)
    if broker is not None and os.path.exists(stalls_path):
        with open(stalls_path, encoding="utf-8") as f:
            result["loop_stalls"] = json.load(f)
    return result


def _broker_cpu_in_window(broker: BrokerProcess, start: int, args: argparse.Namespace) -> tuple[float, float]:
    """Broker CPU seconds per second over the measured window: in all, and in the kernel."""
    window_start = start + int(args.warmup * 1e9)
    time.sleep(max(window_start - time.monotonic_ns(), 0) / 1e9)
    (user, kernel), t0 = user_and_kernel_cpu_seconds(broker.pid), time.monotonic()
    profiler = _start_profiler(broker.pid, args) if args.profile else None
    time.sleep(args.seconds)
    user_after, kernel_after = user_and_kernel_cpu_seconds(broker.pid)
    seconds = time.monotonic() - t0
    if profiler is not None:
        profiler.wait(60)
    return (user_after - user + kernel_after - kernel) / seconds, (kernel_after - kernel) / seconds


def _start_profiler(pid: int, args: argparse.Namespace) -> subprocess.Popen[bytes]:
    """py-spy sampling the broker over the window (its own CPU cost is not the broker's,
    but sampling pauses the broker briefly: profile runs are not measurement runs)."""
    command = ["py-spy", "record", "--pid", str(pid), "--duration", str(int(args.seconds)),
               "--rate", "250", "--format", "raw", "--output", args.profile, "--nonblocking"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _measure_floor(result: dict[str, Any], args: argparse.Namespace) -> None:
    """The floor server at the request rate the broker saw (the default rate when the
    clients' counts are missing); its figures and the ratio go into ``result``."""
    rate = result.get("requests_per_s", float("nan"))
    if math.isnan(rate) or rate <= 0:  # NaN: too few statistics samples
        rate = FLOOR_DEFAULT_RATE
    print(f"floor: {rate:,.0f} requests/s for {args.floor_seconds:.0f} s (bench.latency.floor)", flush=True)
    add_floor(result, floor.measure(rate, args.floor_seconds))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__)
    parser.add_argument("--rate", type=int, default=20_000, help="records per second")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window")
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--target", choices=["pykfk", "mock", "both"], default="both")
    parser.add_argument("--out", default=str(Path(__file__).parent / "last-run"))
    parser.add_argument("--stall-ms", type=float, default=5.0,
                        help="the broker records loop stalls longer than this (ms); 0: no monitor")
    parser.add_argument("--no-floor", action="store_true",
                        help="skip bench.latency.floor (run after the broker at its request rate)")
    parser.add_argument("--floor-seconds", type=float, default=10.0, help="the floor's measured window")
    parser.add_argument("--profile", metavar="FILE",
                        help="also sample the broker with py-spy over the window (raw stacks)")
    args = parser.parse_args(argv)
    targets = ["pykfk", "mock"] if args.target == "both" else [args.target]
    workdir = tempfile.mkdtemp(prefix="pykfk-latency-")
    try:
        results = []
        for target in targets:
            print(f"{target}: {args.rate:,} records/s of 1 KiB for {args.warmup:.0f} s warm-up "
                  f"+ {args.seconds:.0f} s", flush=True)
            results.append(run_once(target, args, workdir))
            if target == "pykfk" and not args.no_floor:
                _measure_floor(results[-1], args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"results-{args.rate}.json"), "w", encoding="utf-8") as f:
        json.dump([{k: v for k, v in r.items() if not k.startswith("_")} for r in results], f, indent=2)
    plot(results, os.path.join(args.out, f"latency-{args.rate}.png"))
    print_table(results)
    print_stalls(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
