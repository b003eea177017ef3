"""python -m bench.latency.floor [--rate 7000] [--seconds 10] [--no-write]

What the system calls of a request cost on this machine, apart from any broker: a
minimal server in C (``floor.c``, built here with ``cc``: epoll, one read per ready
socket, a `pwrite` of each 1 KiB frame's body to a file, a 64-byte answer per frame)
fed by two client processes doing request/answer round trips at ``--rate`` requests/s
in all. The server's own work is a few hundred instructions a request, so its CPU time
per request is the kernel's: the floor under any broker's CPU per request here.
``--no-write`` leaves out the `pwrite`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.scale.probes import CLOCK_TICKS, user_and_kernel_cpu_seconds

FRAME_BODY = 1024
ANSWER_BYTES = 64
_SIZE = struct.Struct(">i")
SOURCE = Path(__file__).with_name("floor.c")


def build(workdir: str) -> str:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("bench.latency.floor needs a C compiler (cc)")
    binary = os.path.join(workdir, "floor")
    subprocess.run([compiler, "-O2", "-o", binary, str(SOURCE)], check=True)
    return binary


def client(port: int, rate: float, window: tuple[float, float]) -> None:
    """Round trips at ``rate`` a second until the window's end; prints how many fell in it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = _SIZE.pack(FRAME_BODY) + b"x" * FRAME_BODY
    start, sent, inside = time.monotonic(), 0, 0
    while (now := time.monotonic()) < window[1]:
        delay = start + sent / rate - now
        if delay > 0:
            time.sleep(delay)
        sock.sendall(frame)
        received = 0
        while received < ANSWER_BYTES:
            chunk = sock.recv(ANSWER_BYTES - received)
            if not chunk:
                raise ConnectionError("server closed")
            received += len(chunk)
        sent += 1
        inside += window[0] <= now
    sock.close()
    print(inside, flush=True)


def measure(rate: float, seconds: float, write: bool = True, warmup_s: float = 2.0) -> dict[str, float]:
    """Runs the floor server at ``rate`` requests/s for ``seconds`` (after ``warmup_s``);
    its CPU per request in all and in the kernel.

    The total (utime + stime) is the scheduler's exact runtime; the split between them is
    not: without ``CONFIG_VIRT_CPU_ACCOUNTING_GEN`` the kernel charges each scheduler tick
    (``CONFIG_HZ``) to user or kernel by where it found the process, and scales the exact
    total by those counts. A server running a few microseconds per wakeup is caught by a
    few hundred ticks in a run, so its kernel share is a small sample (it has read 0%, 66%
    and 100% on the same machine); ``ticks``, its CPU time in /proc's clock ticks, gives
    the order of the number of samples it rests on. Its own code being a few hundred
    instructions a request, the true share is close to 100%."""
    with tempfile.TemporaryDirectory(prefix="pykfk-floor-") as workdir:
        server = subprocess.Popen([build(workdir), os.path.join(workdir, "segment.log"), "1" if write else "0"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            # CLOCK_MONOTONIC is the machine's: the clients share the window's ends.
            window = (time.monotonic() + warmup_s, time.monotonic() + warmup_s + seconds)
            clients = [subprocess.Popen([sys.executable, "-m", "bench.latency.floor", "--client", str(port),
                                         str(rate / 2), *map(str, window)], stdout=subprocess.PIPE, text=True,
                                        cwd=Path(__file__).parents[2])
                       for _ in range(2)]
            time.sleep(max(window[0] - time.monotonic(), 0))
            user, kernel = user_and_kernel_cpu_seconds(server.pid)
            time.sleep(max(window[1] - time.monotonic(), 0))
            user_after, kernel_after = user_and_kernel_cpu_seconds(server.pid)
            requests = sum(int(c.communicate(timeout=60)[0]) for c in clients)
        finally:
            server.communicate(timeout=10)  # closing its stdin stops it
    total = user_after - user + kernel_after - kernel
    kernel_s = kernel_after - kernel
    return {"requests_per_s": requests / seconds, "cpu_us_per_request": total / max(requests, 1) * 1e6,
            "kernel_us_per_request": kernel_s / max(requests, 1) * 1e6,
            "kernel_share": kernel_s / max(total, 1e-9), "ticks": round(total * CLOCK_TICKS),
            "write": write}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency.floor", description=__doc__)
    parser.add_argument("--rate", type=float, default=7000, help="requests per second, both clients")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--no-write", action="store_true", help="answer without the pwrite")
    parser.add_argument("--client", nargs=4, type=float, help=argparse.SUPPRESS)  # port, rate, window
    args = parser.parse_args(argv)
    if args.client:
        port, rate, *window = args.client
        client(int(port), rate, (window[0], window[1]))
        return 0
    floor = measure(args.rate, args.seconds, write=not args.no_write)
    print(f"{floor['requests_per_s']:,.0f} requests/s; server CPU {floor['cpu_us_per_request']:.1f} us a request"
          f"{' (no pwrite)' if args.no_write else ''}, {floor['kernel_share']:.0%} of it in the kernel "
          f"(sampled over {floor['ticks']} ticks: see measure())")
    return 0


if __name__ == "__main__":
    sys.exit(main())
