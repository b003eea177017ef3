"""The scale and latency benches run end to end at a tiny size, so they never rot: a
broker process starts, every record comes back, results JSON and plots are written.
Figures are not asserted against their targets (the machine is shared; the benches
themselves print PASS/FAIL), only that they are measured and sane."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=200, check=False)


def test_scale_bench_measures_a_few_hundred_partitions(tmp_path: Path) -> None:
    out = tmp_path / "scale"
    run = _run("bench.scale", "--partitions", "300", "--records", "3", "--rounds", "1",
               "--idle-seconds", "1", "--data-dir", str(tmp_path), "--out", str(out))
    assert "creating a topic of 300 partitions" in run.stdout, run.stderr
    result = json.loads((out / "results.json").read_text())
    # round 0 on the new topic, round 1 after the group read every partition
    assert result["records_read"] == result["records_expected"] == 2 * 900
    assert [r["records_read"] for r in result["rounds"]] == [900, 900]
    assert all(r["produce_records_per_s"] > 0 and r["consume_records_per_s"] > 0
               for r in result["rounds"])
    assert not result["consumer_errors"] and not result["server_log_errors"]
    assert 0 < result["create_s"] < 60 and 0 < result["metadata_ms"] < 1000
    # one descriptor per partition, plus a few for the consumer's connections
    assert 300 <= result["fds_peak_during_consume"] - result["fds_empty_broker"] <= 360
    assert {check["name"] for check in result["checks"]} >= {
        "idle CPU", "created in", "produce, slowest round / round 0 (records/s)",
        "produce, slowest round"}
    assert (out / "scale.png").stat().st_size > 1000
    assert run.returncode in (0, 1)  # 1: a target missed, reported, not a crash
    # the requests of each round, counted by the broker (its metrics endpoint)
    for r in result["rounds"]:
        assert 1 <= r["produce_requests"]["Produce"] <= 900
        assert r["consume_requests"]["Fetch"] >= 1 and r["consume_requests"]["OffsetCommit"] == 1
        assert "JoinGroup" not in r["consume_requests"]  # assigned, no rebalance
    # the steady-state verdict, computed from the rounds and printed
    verdict = result["verdict"]
    ratio = result["rounds"][1]["produce_records_per_s"] / result["rounds"][0]["produce_records_per_s"]
    produce_1 = next(c for c in verdict["criteria"] if c["criterion"] == "produce, round 1 / round 0")
    assert produce_1["value"] == pytest.approx(ratio, abs=1e-3) and produce_1["passed"] == (ratio >= 0.8)
    # one round after round 0 is fewer than the three the verdict asks for
    assert verdict["passed"] is False
    assert "steady state at 300 partitions (assign consumer" in run.stdout
    assert "FAIL  rounds after the group read every partition" in run.stdout


def test_scale_bench_subscribes_in_a_group(tmp_path: Path) -> None:
    """The subscribe mode: each round a new member joins the group and is given every
    partition by a rebalance; it reads what the last one committed."""
    out = tmp_path / "scale-subscribe"
    run = _run("bench.scale", "--partitions", "200", "--records", "2", "--rounds", "3",
               "--consumer", "subscribe", "--idle-seconds", "1", "--data-dir", str(tmp_path),
               "--out", str(out))
    assert run.returncode in (0, 1), run.stdout + run.stderr
    result = json.loads((out / "results.json").read_text())
    assert result["consumer"] == "subscribe" and not result["consumer_errors"]
    assert [r["records_read"] for r in result["rounds"]] == [400] * 4
    for r in result["rounds"]:
        assert r["consume_requests"]["JoinGroup"] >= 1 and r["consume_requests"]["SyncGroup"] >= 1
        assert 0 < r["consume_assignment_s"] < r["consume_s"]
    criteria = {c["criterion"] for c in result["verdict"]["criteria"]}
    assert {"consume, round 3 / round 0", "produce, round 0"} <= criteria
    assert result["verdict"]["passed"] == all(c["passed"] for c in result["verdict"]["criteria"])
    assert "(subscribe consumer, load average" in run.stdout


def test_latency_bench_measures_pykfk_and_the_mock_floor(tmp_path: Path) -> None:
    out = tmp_path / "latency"
    run = _run("bench.latency", "--rate", "500", "--seconds", "2", "--warmup", "1",
               "--floor-seconds", "2", "--out", str(out))
    assert run.returncode == 0, run.stdout + run.stderr
    results = {r["target"]: r for r in json.loads((out / "results-500.json").read_text())}
    assert set(results) == {"pykfk", "mock"}
    for result in results.values():
        assert 400 <= result["achieved_rate"] <= 600 and result["failed"] == 0
        assert 0 < result["end_to_end"]["p50_ms"] <= result["end_to_end"]["p99_ms"] <= result["end_to_end"]["max_ms"]
        assert 0 < result["ack"]["p50_ms"] <= result["ack"]["max_ms"]
    assert results["pykfk"]["broker_cpu_us_per_request"] > results["pykfk"]["broker_kernel_us_per_request"] >= 0
    # the broker's loop-stall monitor ran: its histogram is in the results and the output
    stalls = results["pykfk"]["loop_stalls"]
    assert sum(stalls["histogram"].values()) == sum(stalls["cpu_histogram"].values()) == stalls["stalls"]
    assert "event-loop stalls over" in run.stdout and "collections:" in run.stdout
    assert (out / "latency-500.png").stat().st_size > 1000
    # the floor server ran in the same run, at the request rate the broker saw
    floor, pykfk = results["pykfk"]["floor"], results["pykfk"]
    assert 0.5 * pykfk["requests_per_s"] <= floor["requests_per_s"] <= 1.5 * pykfk["requests_per_s"]
    assert 0 < floor["cpu_us_per_request"] < 10_000
    assert pykfk["cpu_ratio_to_floor"] == pytest.approx(
        pykfk["broker_cpu_us_per_request"] / floor["cpu_us_per_request"])
    assert "x the floor's" in run.stdout and "floor" not in results


def test_syscall_floor_bench_serves_every_round_trip(tmp_path: Path) -> None:
    run = _run("bench.latency.floor", "--rate", "400", "--seconds", "1")
    assert run.returncode == 0, run.stdout + run.stderr
    # "<rate> requests/s; server CPU <x> us a request, <p>% of it in the kernel"
    rate, _, rest = run.stdout.strip().partition(" requests/s; server CPU ")
    assert 300 <= float(rate.replace(",", "")) <= 500 and 0 <= float(rest.split()[0]) < 10_000
    assert rest.split(", ")[1].split("%")[0].isdigit() and "of it in the kernel" in rest
