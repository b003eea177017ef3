"""Runs one client process against one system and measures it.

A run = one child process (a Python workload from ``workloads.py`` or the Java peer
client) that produces or consumes up to N messages. While it goes, the harness shows a
progress bar, samples the broker's resident memory, and brackets the child's timed
section (its ``start`` and ``result`` lines) with the broker's CPU seconds from /proc.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from bench.paper.systems import RssSampler, cpu_seconds

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    """What one run measured. Times in seconds, sizes in bytes unless named otherwise."""

    system: str
    client: str
    test: str  # "produce b1", "produce b50", "produce default", "consume"
    rep: int
    n: int
    size: int
    count: int = 0
    seconds: float = 0.0
    broker_cpu: float | None = None
    client_cpu: float | None = None
    # The client process's busiest threads in the timed section: [name, share of a core].
    client_threads: list[list[Any]] = field(default_factory=list)
    broker_peak_rss_kb: int | None = None
    disk_bytes: int | None = None
    stored_records: int | None = None
    stored_batches: int | None = None
    load1: float = 0.0
    note: str = ""
    error: str = ""
    series: list[tuple[float, int]] = field(default_factory=list)

    @property
    def msgs_per_s(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.msgs_per_s * self.size / 1e6

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["msgs_per_s"] = self.msgs_per_s
        data["mb_per_s"] = self.mb_per_s
        return data


class Progress:
    """A progress bar on stderr: tqdm when installed, else one rewritten line."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.count = 0
        self._bar: Any = None
        self._t0 = time.monotonic()
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, unit="msg", unit_scale=True,
                                 file=sys.stderr, leave=False, dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def update_to(self, count: int) -> None:
        if not self.enabled or count <= self.count:
            return
        if self._bar is not None:
            self._bar.update(count - self.count)
        else:
            rate = count / max(time.monotonic() - self._t0, 1e-9)
            width = 30
            filled = int(width * min(count / max(self.total, 1), 1))
            sys.stderr.write(f"\r{self.desc} [{'#' * filled}{'.' * (width - filled)}] "
                             f"{count}/{self.total} {rate:,.0f} msg/s ")
            sys.stderr.flush()
        self.count = count

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            sys.stderr.write("\r" + " " * 100 + "\r")
            sys.stderr.flush()


def python_command(spec: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "bench.paper.workloads", json.dumps(spec)]


def java_command(classpath: str, system: str, role: str, host: str, port: int, queue: str,
                 n: int, size: int, batch: str, max_seconds: float) -> list[str]:
    return ["java", "-Xmx256M", "-cp", classpath, "PeerClient", system, role, host, str(port),
            queue, str(n), str(size), batch, str(max_seconds)]


def run_child(cmd: list[str], run: Run, broker_pid: int | None, log: IO[str],
              progress: bool, timeout: float) -> Run:
    """Run one client process to the end and fill ``run`` with what was measured."""
    run.load1 = os.getloadavg()[0]
    bar = Progress(run.n, f"{run.system}/{run.client} {run.test} #{run.rep + 1}", progress)
    cpu_start: float | None = None
    t_start: float | None = None
    result: dict[str, Any] | None = None
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                            cwd=REPO, text=True, bufsize=1)
    killed = threading.Event()

    def kill() -> None:
        killed.set()
        proc.kill()

    watchdog = threading.Timer(timeout, kill)
    watchdog.start()
    try:
        with RssSampler(broker_pid) as sampler:
            assert proc.stdout is not None
            for line in proc.stdout:
                now = time.perf_counter()
                if line.startswith("progress "):
                    count = int(line.split()[1])
                    if t_start is not None:
                        run.series.append((now - t_start, count))
                    bar.update_to(count)
                elif line.startswith("start"):
                    t_start = now
                    cpu_start = _cpu(broker_pid)
                elif line.startswith("result "):
                    if broker_pid is not None and cpu_start is not None:
                        end = _cpu(broker_pid)
                        run.broker_cpu = None if end is None else end - cpu_start
                    result = json.loads(line[len("result "):])
                else:
                    log.write(line)
        run.broker_peak_rss_kb = sampler.peak_kb or None
    except BaseException:
        proc.kill()  # interrupted: the client must not outlive the harness
        raise
    finally:
        watchdog.cancel()
        bar.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    run.client_cpu = usage.ru_utime + usage.ru_stime
    if killed.is_set():
        run.error = f"client killed after {timeout:.0f}s"
    if result is None:
        run.error = run.error or f"client exited with {proc.returncode} without a result"
        return run
    run.count = int(result["count"])
    run.seconds = float(result["seconds"])
    run.note = result.get("note", "") or ""
    run.client_threads = result.get("threads") or []
    errors = result.get("errors") or []
    if errors:
        run.error = "; ".join(errors)[:300]
    if run.series and run.series[0][0] > 0:
        run.series.insert(0, (0.0, 0))
    return run


def _cpu(pid: int | None) -> float | None:
    if pid is None:
        return None
    with contextlib.suppress(OSError):
        return cpu_seconds(pid)
    return None


# Magic-2 batch framing, as much as counting needs (apache/kafka DefaultRecordBatch):
#   base_offset int64 @0, batch_length int32 @8 (bytes after this field),
#   ..., records_count int32 @57; a batch is 12 + batch_length bytes.
BATCH_LENGTH = struct.Struct(">i")
RECORDS_COUNT = struct.Struct(">i")
LOG_OVERHEAD = 12
RECORDS_COUNT_OFFSET = 57


def count_batches(partition_dir: str) -> tuple[int, int]:
    """(records, batches) in the .log files of a partition dir; stops at a torn tail."""
    records = batches = 0
    for name in sorted(os.listdir(partition_dir)):
        if not name.endswith(".log"):
            continue
        with open(os.path.join(partition_dir, name), "rb") as f:
            data = f.read()
        pos, end = 0, len(data)
        while pos + RECORDS_COUNT_OFFSET + 4 <= end:
            (length,) = BATCH_LENGTH.unpack_from(data, pos + 8)
            if length <= 0 or pos + LOG_OVERHEAD + length > end:
                break
            records += RECORDS_COUNT.unpack_from(data, pos + RECORDS_COUNT_OFFSET)[0]
            batches += 1
            pos += LOG_OVERHEAD + length
    return records, batches


def settle_bytes(measure: Any, quiet: float = 1.0, limit: float = 15.0) -> int:
    """Size of a store once it stopped changing for ``quiet`` seconds (stores that flush
    asynchronously keep writing after the client is done)."""
    last = measure()
    stable_since = time.monotonic()
    give_up = stable_since + limit
    while time.monotonic() < give_up:
        time.sleep(0.25)
        now_bytes = measure()
        if now_bytes != last:
            last, stable_since = now_bytes, time.monotonic()
        elif time.monotonic() - stable_since >= quiet:
            break
    return last
