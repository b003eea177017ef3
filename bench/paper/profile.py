"""``python -m bench.paper.profile``: where the time goes in one of the paper's runs.

    python -m bench.paper.profile --test b1                  # producer, batch 1
    python -m bench.paper.profile --test default -n 5000000
    python -m bench.paper.profile --test consume --client pykfk
    python -m bench.paper.profile --test b1 --mock           # the client's own ceiling

Starts a pykfk broker on 127.0.0.1 (configured as in ``python -m bench.paper``), runs one
client workload against it, and while the timed section goes it samples

- the broker process with py-spy (Python stacks; ``broker.collapsed``, one folded stack
  per line, loadable in speedscope or flamegraph.pl), and
- the client process with ``perf record`` where perf works here (every thread, native
  frames: librdkafka's I/O threads are where a confluent-kafka client spends its time;
  ``client-perf.txt``), else with py-spy (its Python threads only).

With ``--mock`` no broker is started: confluent-kafka runs against librdkafka's
in-process mock cluster (the ceiling row of ``python -m bench.paper``), and only the
client is sampled, to compare with the same client against pykfk.

``summary.md`` says what share of a core each side used, the client's busiest threads,
and the top frames of each profile. Sampling costs CPU on a 2-core machine: the
throughput of a profiled run is lower than an unprofiled one, so take figures from
``python -m bench.paper`` and causes from here.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any

from bench.paper import systems
from bench.paper.runner import REPO, python_command

TESTS = ("b1", "b50", "default", "consume")
CLIENTS = ("confluent", "kafka-python", "pykfk")
TOP_FRAMES = 20
SPY_RATE_HZ = 250
PERF_RATE_HZ = 499


@dataclass
class Options:
    test: str
    client: str
    n: int
    size: int
    seconds: float
    out: str
    mock: bool


def parse_args(argv: list[str] | None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.paper.profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--test", choices=TESTS, default="b1", help="which run (default b1)")
    p.add_argument("--client", choices=CLIENTS, default="confluent",
                   help="client driving the broker (default confluent)")
    p.add_argument("-n", "--messages", type=int, default=3_000_000,
                   help="messages the run sends or reads at most (default 3,000,000)")
    p.add_argument("--size", type=int, default=200, help="message size (default 200)")
    p.add_argument("--seconds", type=float, default=8.0,
                   help="how long to sample, from the start of the timed section (default 8)")
    p.add_argument("--mock", action="store_true",
                   help="no broker: confluent-kafka against librdkafka's mock cluster")
    p.add_argument("--out", default=None,
                   help="output folder (default bench/results/profile-<test>-<time>)")
    a = p.parse_args(argv)
    if a.messages <= 0 or a.seconds <= 0:
        p.error("-n and --seconds must be positive")
    if a.mock and a.client != "confluent":
        p.error("--mock runs confluent-kafka only (the mock cluster is librdkafka's)")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"profile-{'mock-' if a.mock else ''}{a.test}-{stamp}"
    out = a.out or os.path.join(REPO, "bench", "results", name)
    return Options(a.test, a.client, a.messages, a.size, a.seconds, out, a.mock)


def py_spy() -> str | None:
    """The py-spy executable: on PATH, or beside this Python (where pip puts it when
    that folder is not on PATH)."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return shutil.which("py-spy") or (beside if os.access(beside, os.X_OK) else None)


def perf_usable() -> str | None:
    """None when ``perf record`` can sample a process here, else why not."""
    if shutil.which("perf") is None:
        return "perf is not installed (Debian: linux-perf)"
    probe = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", "/dev/null", "true"],
                           capture_output=True, text=True, timeout=30, check=False)
    if probe.returncode != 0:
        return "perf record failed: " + (probe.stderr.strip().splitlines() or ["?"])[-1]
    return None


def _spec(opts: Options, bootstrap: str, topic: str, test: str, n: int) -> dict[str, Any]:
    batch = test[1:] if test.startswith("b") else "50"
    return {"client": opts.client, "role": "consume" if test == "consume" else "produce",
            "bootstrap": bootstrap, "topic": topic, "n": n, "size": opts.size, "batch": batch,
            # the run must outlast the sampling window
            "max_seconds": opts.seconds + 5, "fetch_bytes": 200 * 1024, "acks": 1}


def _run_to_end(spec: dict[str, Any], log: IO[str]) -> dict[str, Any]:
    """Runs a workload child untimed (filling a topic for the consume test)."""
    done = subprocess.run(python_command(spec), cwd=REPO, stdout=subprocess.PIPE, stderr=log,
                          text=True, timeout=600, check=False)
    return _result(done.stdout.splitlines())


def _result(lines: Iterable[str]) -> dict[str, Any]:
    for line in lines:
        if line.startswith("result "):
            return json.loads(line[len("result "):])
    raise RuntimeError("the workload printed no result (see client.log)")


def _samplers(opts: Options, broker_pid: int | None, client_pid: int,
              perf_problem: str | None) -> list[subprocess.Popen[bytes]]:
    seconds = str(max(1, round(opts.seconds)))
    spy = [py_spy() or "py-spy", "record", "--nonblocking", "-r", str(SPY_RATE_HZ), "-d", seconds, "-f", "raw"]
    procs = []
    if broker_pid is not None:
        procs.append(subprocess.Popen(
            spy + ["-p", str(broker_pid), "-o", os.path.join(opts.out, "broker.collapsed")],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    if perf_problem is None:
        cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(PERF_RATE_HZ), "-g",
               "-p", str(client_pid), "-o", os.path.join(opts.out, "client.perf"), "--", "sleep", seconds]
    else:
        cmd = spy + ["-p", str(client_pid), "-o", os.path.join(opts.out, "client.collapsed")]
    procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    return procs


def profile(opts: Options) -> str:
    """Runs the profiled workload; returns the path of summary.md."""
    if py_spy() is None:
        raise SystemExit("py-spy is not installed: pip install py-spy (or the [bench] extra)")
    os.makedirs(opts.out, exist_ok=True)
    perf_problem = perf_usable()
    workdir = tempfile.mkdtemp(prefix="pykfk-profile-")
    service = None if opts.mock else systems.PykfkService(workdir)
    log = open(os.path.join(opts.out, "client.log"), "w", encoding="utf-8")  # noqa: SIM115
    try:
        bootstrap = ""  # the workload's way of asking for the mock cluster
        if service is not None:
            service.start()
            bootstrap = f"127.0.0.1:{service.port}"
        topic = f"profile-{opts.test}"
        if opts.test == "consume" and service is not None:
            _run_to_end({**_spec(opts, bootstrap, topic, "b50", opts.n), "client": "confluent",
                         "max_seconds": 600}, log)
        outcome = _profiled_run(opts, None if service is None else service.pid,
                                _spec(opts, bootstrap, topic, opts.test, opts.n), perf_problem, log)
    finally:
        log.close()
        if service is not None:
            service.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return write_summary(opts, outcome, perf_problem)


def _profiled_run(opts: Options, broker_pid: int | None, spec: dict[str, Any], perf_problem: str | None,
                  log: IO[str]) -> dict[str, Any]:
    child = subprocess.Popen(python_command(spec), cwd=REPO, stdout=subprocess.PIPE, stderr=log,
                             stdin=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None
        lines = iter(child.stdout)
        for line in lines:
            if line.startswith("start"):
                break
        cpu_start = None if broker_pid is None else systems.cpu_seconds(broker_pid)
        started = time.perf_counter()
        samplers = _samplers(opts, broker_pid, child.pid, perf_problem)
        problems = []
        for proc in samplers:
            _, err = proc.communicate(timeout=opts.seconds + 120)
            if proc.returncode != 0:
                problems.append(f"{proc.args[0]} exited {proc.returncode}: {err.decode(errors='replace')[-300:]}")
        broker_busy = None
        if broker_pid is not None and cpu_start is not None:
            broker_busy = (systems.cpu_seconds(broker_pid) - cpu_start) / (time.perf_counter() - started)
        result = _result(lines)
        child.wait(timeout=600)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return {"result": result, "broker_busy": broker_busy, "problems": problems}


# ---------------------------------------------------------------- summaries

def collapsed_top(path: str, top: int = TOP_FRAMES) -> tuple[int, list[tuple[str, float]], list[tuple[str, float]]]:
    """(samples, [(frame, self share)], [(frame, inclusive share)]) of a folded-stacks
    file (``frame;frame;... count`` per line)."""
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack or not count_text.isdigit():
                continue
            count = int(count_text)
            frames = stack.split(";")
            total += count
            own[frames[-1]] += count
            for frame in set(frames):
                inclusive[frame] += count
    if not total:
        return 0, [], []
    return (total, [(f, c / total) for f, c in own.most_common(top)],
            [(f, c / total) for f, c in inclusive.most_common(top)])


def perf_tables(path: str) -> str:
    """perf's view of the client: samples per thread and library, and the hottest
    symbols per thread."""
    parts = []
    for sort in ("comm,dso", "comm,sym"):
        report = subprocess.run(["perf", "report", "-i", path, "--stdio", "-q", "-g", "none",
                                 "--no-children", "--sort", sort], capture_output=True, text=True,
                                timeout=300, check=False)
        lines = [line.rstrip() for line in report.stdout.splitlines() if line.strip()]
        parts.append("\n".join(lines[:TOP_FRAMES]))
    return "\n\n".join(parts)


def _frames_table(title: str, rows: list[tuple[str, float]]) -> list[str]:
    out = [f"| {title} | share of samples |", "|---|---|"]
    out += [f"| `{frame.replace('|', '/')}` | {share:.1%} |" for frame, share in rows]
    return out


def write_summary(opts: Options, outcome: dict[str, Any], perf_problem: str | None) -> str:
    result = outcome["result"]
    rate = result["count"] / result["seconds"] if result["seconds"] > 0 else 0.0
    target = "librdkafka's mock cluster (no broker process)" if opts.mock else "pykfk"
    busy = outcome["broker_busy"]
    lines = [
        (f"# Profile: {'consume' if opts.test == 'consume' else 'produce ' + opts.test}, "
        f"{target} driven by {opts.client}"),
        "",
        (f"- {dt.datetime.now().isoformat(timespec='seconds')}, {os.cpu_count()} cores, "
        f"{opts.size}-byte messages, {opts.seconds:g} s sampled"),
        (f"- the profiled run moved {result['count']:,} messages at {rate:,.0f} msg/s "
         "(sampling slows it: see python -m bench.paper for figures)"),
        "- broker process: " + ("none" if busy is None else f"{busy:.0%} of a core while sampled"),
        ("- client process, busiest threads (share of a core over the timed section): "
         + ", ".join(f"{name} {share:.0%}" for name, share in result.get("threads", []))),
        "",
    ]
    lines += [f"- **sampler problem**: {p}" for p in outcome["problems"]]
    broker = os.path.join(opts.out, "broker.collapsed")
    if os.path.exists(broker):
        samples, own, inclusive = collapsed_top(broker)
        lines += ["## Broker (py-spy, Python stacks, idle time left out)", "",
                  (f"{samples:,} samples at {SPY_RATE_HZ} Hz. A sample taken while the broker "
                  "is inside a system call counts for the Python line that made it, so lines "
                  "that end in one (the segment write, the socket send) weigh more here than "
                  "their Python cost."), ""]
        lines += _frames_table("self", own) + [""] + _frames_table("inclusive", inclusive) + [""]
    client_perf = os.path.join(opts.out, "client.perf")
    client_spy = os.path.join(opts.out, "client.collapsed")
    if perf_problem is None and os.path.exists(client_perf):
        text = perf_tables(client_perf)
        with open(os.path.join(opts.out, "client-perf.txt"), "w", encoding="utf-8") as f:
            f.write(text + "\n")
        lines += ["## Client (perf, every thread, native frames)", "",
                  f"Samples at {PERF_RATE_HZ} Hz, by thread and library, then by thread and symbol:",
                  "", "```", text, "```", ""]
    elif os.path.exists(client_spy):
        samples, own, _ = collapsed_top(client_spy)
        lines += ["## Client (py-spy, Python threads only)", "",
                  f"perf is not usable here ({perf_problem}); {samples:,} samples.", ""]
        lines += _frames_table("self", own) + [""]
    path = os.path.join(opts.out, "summary.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    path = profile(opts)
    print(f"profile written to {os.path.dirname(path)}", file=sys.stderr)
    with open(path, encoding="utf-8") as f:
        print(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
