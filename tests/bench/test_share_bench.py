"""The share-group bench runs end to end at a small size, so it never rots: every
consumer gets every record and its figures are measured (not asserted against a target:
the machine is shared)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_share_bench_compares_a_share_group_with_rabbitmq_and_a_classic_group(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "bench.share", "--records", "3000", "--runs", "1",
                          "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=280, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((tmp_path / "results.json").read_text())
    assert set(result["medians"]) == {"share", "classic", "rabbitmq"}
    for figures in result["medians"].values():
        assert figures["records_per_s"] > 0 and figures["seconds"] > 0
    assert (tmp_path / "share.png").stat().st_size > 0
