"""The log and the server read time through the injected clock (pykfk.clock), so a test
can drive them with a ManualClock: a direct read of the wall clock or the monotonic clock
in ``pykfk/log`` or ``pykfk/server`` fails this test, outside the files listed here.

Not covered: ``time.perf_counter`` for the length of a piece of work (request handling
time, loop stall sampling), which measures the machine's CPU rather than reading the time
of day or a timeout.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("pykfk/log", "pykfk/server")
# time.time(), time.monotonic() and their _ns forms, or the names imported from time.
DIRECT_READ = re.compile(r"\btime\.(?:time|monotonic|time_ns|monotonic_ns)\s*\(|^\s*from time import .*\b(?:time|monotonic)\b",
                         re.MULTILINE)
# Files still reading time directly: each to move to the clock, then to leave this list.
ALLOWED: set[str] = set()


def _direct_readers() -> set[str]:
    found = set()
    for directory in SCANNED:
        for path in sorted((ROOT / directory).rglob("*.py")):
            if DIRECT_READ.search(path.read_text(encoding="utf-8")):
                found.add(path.relative_to(ROOT).as_posix())
    return found


def test_the_log_and_the_server_read_time_through_the_clock() -> None:
    unexpected = _direct_readers() - ALLOWED
    assert not unexpected, f"read time through the injected clock (pykfk.clock), not directly: {sorted(unexpected)}"


def test_the_allow_list_names_only_files_that_still_read_time_directly() -> None:
    stale = {name for name in ALLOWED if (ROOT / name).exists()} - _direct_readers()
    assert not stale, f"these files use the clock now: strike them from ALLOWED: {sorted(stale)}"


def test_the_pattern_catches_direct_reads() -> None:
    for line in ("x = time.time()", "deadline = time.monotonic() + 5", "t = time.time_ns()",
                 "from time import monotonic"):
        assert DIRECT_READ.search(line), line
    for line in ("self.clock.time_ms()", "clock.monotonic()", "time.perf_counter()", "from time import perf_counter"):
        assert not DIRECT_READ.search(line), line
