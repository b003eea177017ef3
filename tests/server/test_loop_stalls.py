"""The loop-stall monitor names what blocked the event loop (uvloop, as the broker runs)."""

from __future__ import annotations

import asyncio
import gc
import json
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
