"""The loop-stall monitor names what blocked the event loop (uvloop, as the broker runs)."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

import uvloop

from pykfk.server.loop_stalls import LoopStallMonitor


def deliberate_block() -> None:
    time.sleep(0.05)


async def _run(monitor: LoopStallMonitor) -> None:
    monitor.start(asyncio.get_running_loop())
    await asyncio.sleep(0.05)
    asyncio.get_running_loop().call_soon(deliberate_block)
    await asyncio.sleep(0.1)
    gc.collect()  # a full collection, timed by its generation
    await asyncio.sleep(0.05)
    monitor.stop()


def test_a_50_ms_block_is_recorded_with_its_name(tmp_path: Path) -> None:
    report_path = tmp_path / "stalls.json"
    monitor = LoopStallMonitor(20, str(report_path))
    loop = uvloop.new_event_loop()
    try:
        loop.run_until_complete(_run(monitor))
    finally:
        loop.close()
    report = json.loads(report_path.read_text())
    blocks = [s for s in report["worst"] if s["name"] == "deliberate_block"]
    assert len(blocks) == 1, report
    assert 40 <= blocks[0]["ms"] < 1000
    assert "test_loop_stalls.py" in blocks[0]["at"]
    assert blocks[0]["cpu_ms"] < 25  # asleep: the loop thread's own CPU time is not the stall
    assert report["by_name"][0]["name"] == "deliberate_block" or any(
        e["name"] == "deliberate_block" and e["count"] == 1 for e in report["by_name"])
    assert sum(report["histogram"].values()) == report["stalls"] >= 1
    assert report["gc"]["2"]["count"] >= 1


# Run as the broker runs it: the loop in the main thread, SIGALRM free (pytest-timeout
# holds it in this process), so the stack is sampled from the timer signal.
_SIGNAL_SAMPLER = r"""
import asyncio, json, sys, threading, time
import uvloop
from pykfk.server.loop_stalls import LoopStallMonitor

def deliberate_block():
    time.sleep(0.05)

def deliberate_spin():
    end = time.perf_counter() + 0.05
    while time.perf_counter() < end:
        pass

def switches(name):
    import os
    for thread in threading.enumerate():
        if thread.name == name:
            with open(f"/proc/self/task/{thread.native_id}/status") as f:
                return sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
    return -1

async def main():
    monitor = LoopStallMonitor(20, sys.argv[1])
    monitor.start(asyncio.get_running_loop())
    assert monitor._use_signal
    await asyncio.sleep(0.1)
    before = switches("pykfk-loop-stalls")
    await asyncio.sleep(1.0)  # nothing stalls: the monitor's thread sleeps
    quiet = switches("pykfk-loop-stalls") - before
    asyncio.get_running_loop().call_soon(deliberate_block)
    await asyncio.sleep(0.1)
    asyncio.get_running_loop().call_soon(deliberate_spin)
    await asyncio.sleep(0.1)
    monitor.stop()
    print(json.dumps({"quiet_switches": quiet}))

uvloop.run(main())
"""


def test_the_stack_is_sampled_from_a_timer_signal_with_no_polling(tmp_path: Path) -> None:
    report_path = tmp_path / "stalls.json"
    run = subprocess.run([sys.executable, "-c", _SIGNAL_SAMPLER, str(report_path)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    # A polling watchdog switched about 400 times a second; the report thread wakes once.
    assert json.loads(run.stdout)["quiet_switches"] <= 5, run.stdout
    report = json.loads(report_path.read_text())
    names = {s["name"]: s for s in report["worst"]}
    for name in ("deliberate_block", "deliberate_spin"):
        assert name in names, report
        assert 40 <= names[name]["ms"] < 1000
        assert "<string>" in names[name]["at"]
    assert names["deliberate_spin"]["cpu_ms"] >= 20  # the spin is the loop's own CPU time
