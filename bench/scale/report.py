"""Targets of a broker holding thousands of partitions, and how the results are shown."""

from __future__ import annotations

from typing import Any

# (name, result key, limit, unit, how the value is derived)
FDS_PER_PARTITION_MAX = 1.2
# Every round's records/s against round 0's (produce to the new topic): the later rounds
# come after a consumer group has read every partition and must not collapse.
STEADY_ROUND_RATIO_MIN = 0.8
# Produce records/s of 100 B records (confluent-kafka, linger.ms=5), the target up to
# 5,000 partitions.
PRODUCE_RECORDS_PER_S_MIN = 100_000
PRODUCE_TARGET_MAX_PARTITIONS = 5_000


def _fds_per_partition(result: dict[str, Any]) -> float:
    extra = result["fds_peak_during_consume"] - result["fds_empty_broker"]
    return extra / result["partitions"]


def check_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    rows = [
        ("created in", result["create_s"], 2.0, "s"),
        ("other client's worst delay meanwhile", result["other_client_worst_ms"], 50.0, "ms"),
        ("Metadata of the whole topic", result["metadata_ms"], 10.0, "ms"),
        ("Metadata, the first after the creation", result["metadata_first_ms"], 10.0, "ms"),
        ("open fds per partition (peak, over an empty broker)", _fds_per_partition(result),
         FDS_PER_PARTITION_MAX, ""),
        ("idle CPU", result["idle_cpu_percent"], 1.0, "% of a core"),
    ]
    checks = [{"name": name, "value": round(value, 3), "limit": limit, "unit": unit,
               "passed": value <= limit} for name, value, limit, unit in rows]
    checks.extend(_round_checks(result))
    every_record = result["records_read"] == result["records_expected"]
    checks.append({"name": "every record read, no consumer error", "value": result["records_read"],
                   "limit": result["records_expected"], "unit": "records",
                   "passed": every_record and not result["consumer_errors"]})
    return checks


def _round_checks(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Lower bounds: the slowest round against round 0, and produce records/s."""
    rounds = result["rounds"]
    rows = []
    for side in ("produce", "consume"):
        rates = [r[f"{side}_records_per_s"] for r in rounds]
        rows.append((f"{side}, slowest round / round 0 (records/s)", min(rates) / rates[0],
                     STEADY_ROUND_RATIO_MIN, "x"))
    if result["partitions"] <= PRODUCE_TARGET_MAX_PARTITIONS:
        rows.append(("produce, slowest round", min(r["produce_records_per_s"] for r in rounds),
                     PRODUCE_RECORDS_PER_S_MIN, "records/s"))
    return [{"name": name, "value": round(value, 3), "limit": limit, "unit": unit,
             "passed": value >= limit, "at_least": True} for name, value, limit, unit in rows]


STEADY_ROUNDS_MIN = 3


def steady_state_verdict(result: dict[str, Any]) -> dict[str, Any]:
    """The steady-state criteria, each from this run's rounds: at least three rounds after
    the group read every partition, each round's produce and consume records/s at least
    0.8x round 0's, produce at least 100,000 records/s in every round up to 5,000
    partitions, every record read. ``passed`` only if all hold."""
    rounds = result["rounds"]
    criteria = [{"criterion": "rounds after the group read every partition", "value": len(rounds) - 1,
                 "limit": STEADY_ROUNDS_MIN, "unit": "rounds", "passed": len(rounds) - 1 >= STEADY_ROUNDS_MIN}]
    for side in ("produce", "consume"):
        first = rounds[0][f"{side}_records_per_s"]
        for r in rounds[1:]:
            ratio = r[f"{side}_records_per_s"] / first
            criteria.append({"criterion": f"{side}, round {r['round']} / round 0", "value": round(ratio, 3),
                             "limit": STEADY_ROUND_RATIO_MIN, "unit": "x",
                             "passed": ratio >= STEADY_ROUND_RATIO_MIN})
    if result["partitions"] <= PRODUCE_TARGET_MAX_PARTITIONS:
        for r in rounds:
            rate = r["produce_records_per_s"]
            criteria.append({"criterion": f"produce, round {r['round']}", "value": round(rate),
                             "limit": PRODUCE_RECORDS_PER_S_MIN, "unit": "records/s",
                             "passed": rate >= PRODUCE_RECORDS_PER_S_MIN})
    every_record = result["records_read"] == result["records_expected"] and not result["consumer_errors"]
    criteria.append({"criterion": "every record read, no consumer error", "value": result["records_read"],
                     "limit": result["records_expected"], "unit": "records", "passed": every_record})
    loads = [r["load_average"] for r in rounds]
    return {"passed": all(c["passed"] for c in criteria), "criteria": criteria,
            "load_average": [min(loads), max(loads)]}


def print_verdict(result: dict[str, Any]) -> None:
    verdict = result["verdict"]
    failed = [c for c in verdict["criteria"] if not c["passed"]]
    low, high = verdict["load_average"]
    print(f"\nsteady state at {result['partitions']:,} partitions ({result.get('consumer', 'assign')} "
          f"consumer, load average {low:.1f}-{high:.1f}): {'PASS' if verdict['passed'] else 'FAIL'}")
    for c in verdict["criteria"]:
        print(f"  {'PASS' if c['passed'] else 'FAIL'}  {c['criterion']:<48} {c['value']:>10,} {c['unit']:<10}"
              f" (target >= {c['limit']:,})")
    if failed:
        print(f"  {len(failed)} of {len(verdict['criteria'])} criteria missed")


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{result['partitions']:,} partitions on one broker "
          f"(RSS {result['rss_mb']:.0f} MB, {result['records_per_partition']} records of "
          f"{result['value_bytes']} B to each partition a round)")
    for r in result["rounds"]:
        print(f"  round {r['round']}: produce {r['produce_records_per_s']:>9,.0f} records/s "
              f"({r['produce_s']:.1f} s, CPU broker {r['produce_broker_cpu_s']:.1f} s client "
              f"{r.get('produce_client_cpu_s', 0):.1f} s), "
              f"consume {r['consume_records_per_s']:>9,.0f} records/s ({r['consume_s']:.1f} s, "
              f"CPU broker {r.get('consume_broker_cpu_s', 0):.1f} s client "
              f"{r.get('consume_client_cpu_s', 0):.1f} s), load {r.get('load_average', 0):.1f}")
    for check in result["checks"]:
        mark = "PASS" if check["passed"] else "FAIL"
        bound = ">=" if check.get("at_least") else "<="
        print(f"  {mark}  {check['name']:<52} {check['value']:>10} {check['unit']:<12}"
              f" (target {bound} {check['limit']})")


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    checks = [c for c in result["checks"] if c["unit"] != "records"]
    fig, (ax, rounds_ax) = plt.subplots(1, 2, figsize=(13, 4), gridspec_kw={"width_ratios": [3, 2]})
    ratios = [c["limit"] / max(c["value"], 1e-9) if c.get("at_least") else c["value"] / c["limit"]
              for c in checks]
    colors = ["tab:green" if c["passed"] else "tab:red" for c in checks]
    ax.barh([c["name"] for c in checks], ratios, color=colors)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xlabel("measured / target (left of the line: within target)")
    ax.set_title(f"{result['partitions']:,} partitions on one pykfk broker")
    # Records/s of every round: round 0 on the new topic, the later ones in steady state.
    rounds = result["rounds"]
    xs = [r["round"] for r in rounds]
    for side, marker in (("produce", "o"), ("consume", "s")):
        rates = [r[f"{side}_records_per_s"] for r in rounds]
        rounds_ax.plot(xs, rates, marker=marker, label=side)
        rounds_ax.axhline(rates[0] * STEADY_ROUND_RATIO_MIN, linestyle=":", linewidth=1,
                          color=rounds_ax.lines[-1].get_color())
    if result["partitions"] <= PRODUCE_TARGET_MAX_PARTITIONS:
        rounds_ax.axhline(PRODUCE_RECORDS_PER_S_MIN, color="black", linewidth=1,
                          label="produce target")
    rounds_ax.set_xticks(xs)
    rounds_ax.set_xlabel("round (0: new topic; later: after the group read every partition)")
    rounds_ax.set_ylabel("records/s")
    rounds_ax.set_ylim(bottom=0)
    rounds_ax.legend(fontsize="small")
    verdict = result.get("verdict")
    if verdict is not None:
        low, high = verdict["load_average"]
        failed = sum(not c["passed"] for c in verdict["criteria"])
        outcome = "PASS" if verdict["passed"] else f"FAIL ({failed} of {len(verdict['criteria'])} missed)"
        rounds_ax.set_title(f"steady state: {outcome}\n{result.get('consumer', 'assign')} consumer, "
                            f"load {low:.1f}-{high:.1f} (dotted: 0.8x round 0)", fontsize="medium",
                            color="tab:green" if verdict["passed"] else "tab:red")
    else:
        rounds_ax.set_title("rounds (dotted: 0.8x round 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
