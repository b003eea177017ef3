"""The mirror bench runs end to end at a small size, so it never rots: both copiers copy
every record and their figures are measured (not asserted against a target: the
machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_mirror_bench_compares_the_mirror_with_a_plain_loop(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "bench.mirror", "--fast", "--out", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=200, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads((tmp_path / "results.json").read_text())
    assert [r["kind"] for r in summary["results"]] == ["plain", "mirror"]
    for result in summary["results"]:
        assert result["records"] == 20_000
        assert result["records_per_s"] > 0 and result["cpu_s_per_mb"] > 0
    assert summary["throughput_ratio"] > 0 and summary["cpu_per_mb_ratio"] > 0
    assert "mirror / plain" in run.stdout
