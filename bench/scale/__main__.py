"""python -m bench.scale [--partitions 10000] [--records N] [--rounds 3] [--consumer assign|subscribe] [--out DIR]

One broker, one topic of many partitions: its creation under load, Metadata of it, then
a produce to every partition and a consumer group reading it all, and ``--rounds`` more
rounds of the same (the steady state once every partition has been read), each timed.
The consumer is assigned every partition (``assign``) or subscribes and is given every
partition by the group coordinator, a rebalance of them all each round (``subscribe``).
The verdict (every round at least 0.8x round 0's records/s, produce at least 100,000
records/s up to 5,000 partitions) is printed, kept in the results and drawn."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.scale.probes import (
    OtherClient,
    count_difference,
    cpu_seconds,
    create_topic,
    idle_cpu_percent,
    metadata_round_trip_ms,
    open_fds,
    request_counts,
    rss_mb,
)
from bench.scale.report import check_targets, plot, print_table, print_verdict, steady_state_verdict
from bench.scale.traffic import consume_all, produce_all
from pykfk.testing import BrokerProcess, RawClient, free_port

TOPIC = "scale"
# Records a round by default, as in the produce of the issue that found the collapse.
ROUND_RECORDS = 200_000


def say(line: str) -> None:
    print(line, flush=True)


def run(partitions: int, records: int, value_size: int, idle_s: float, rounds: int,
        workdir: str, subscribe: bool) -> dict[str, Any]:
    # The metrics endpoint counts the requests of each round (read between the timed
    # parts: a scrape reads the state of every partition).
    metrics_url = f"http://127.0.0.1:{free_port()}"
    broker = BrokerProcess(os.path.join(workdir, "data"),
                           {"num.partitions": 1, "metrics.listener": metrics_url,
                            # a constant wait before the first rebalance of an empty group,
                            # not work: off, so a subscribing round times the rebalance itself
                            "group.initial.rebalance.delay.ms": 0})
    broker.start()
    try:
        return measure(broker, partitions, records, value_size, idle_s, rounds, subscribe,
                       metrics_url + "/metrics")
    finally:
        broker.stop()


def measure(broker: BrokerProcess, partitions: int, records: int, value_size: int,
            idle_s: float, rounds: int, subscribe: bool, metrics_url: str) -> dict[str, Any]:
    pid = broker.pid
    result: dict[str, Any] = {"partitions": partitions, "records_per_partition": records,
                              "value_bytes": value_size, "data_dir": broker.log_dir,
                              "consumer": "subscribe" if subscribe else "assign"}
    result["fds_empty_broker"] = open_fds(pid)
    raw = RawClient(broker.host, broker.port, timeout=300)
    say(f"creating a topic of {partitions:,} partitions")
    with OtherClient(broker.host, broker.port) as other:
        time.sleep(0.2)
        seconds, error = create_topic(raw, TOPIC, partitions)
        time.sleep(0.1)
    if error:
        raise RuntimeError(f"CreateTopics failed with error code {error}")
    result["create_s"] = seconds
    result["other_client_worst_ms"] = max(other.times_ms)
    result["other_client_requests"] = len(other.times_ms)
    result["fds_after_create"] = open_fds(pid)
    say(f"  created in {seconds:.2f} s; other client's worst round trip "
        f"{result['other_client_worst_ms']:.1f} ms")
    result["metadata_first_ms"], _size = metadata_round_trip_ms(raw, TOPIC, repeats=1)
    result["metadata_ms"], result["metadata_bytes"] = metadata_round_trip_ms(raw, TOPIC)
    say(f"Metadata of the whole topic: {result['metadata_ms']:.1f} ms "
        f"(the first after the creation {result['metadata_first_ms']:.1f} ms; "
        f"{result['metadata_bytes']:,} bytes)")
    raw.close()
    peak = [open_fds(pid)]
    result["rounds"], read, errors = [], 0, []
    for i in range(rounds + 1):
        result["rounds"].append(traffic_round(broker, i, partitions, records, value_size, peak, errors,
                                              subscribe, metrics_url))
        read += result["rounds"][-1]["records_read"]
    first = result["rounds"][0]
    result.update(produce_s=first["produce_s"], consume_s=first["consume_s"], records_read=read,
                  records_expected=partitions * records * (rounds + 1),
                  consumer_errors=errors[:20], fds_peak_during_consume=max(peak))
    result["fds_after_consume"] = open_fds(pid)
    result["rss_mb"] = rss_mb(pid)
    say(f"idle for {idle_s:.0f} s with no client")
    time.sleep(2)
    result["idle_cpu_percent"] = idle_cpu_percent(pid, idle_s)
    result["server_log_errors"] = [line for line in broker.log_text().splitlines()
                                   if " ERROR " in line or "Too many open files" in line][:20]
    return result


def traffic_round(broker: BrokerProcess, i: int, partitions: int, records: int, value_size: int,
                  peak: list[int], errors: list[str], subscribe: bool,
                  metrics_url: str) -> dict[str, Any]:
    """Round 0 produces to the new topic; every later one comes after the consumer group
    has read every partition (the steady state of a topic in use)."""
    count = partitions * records
    when = "to the new topic" if i == 0 else "after the group read every partition"
    say(f"round {i}: producing {records} records of {value_size} B to each partition ({when})")
    # The client's CPU (this process: the Python loop and librdkafka's threads) beside the
    # broker's tells which side a slow round waited for.
    requests_before = request_counts(metrics_url)
    cpu_before, client_before = cpu_seconds(broker.pid), time.process_time()
    produce_s = produce_all(broker.bootstrap, TOPIC, partitions, records, value_size, say)
    produce_cpu_s = cpu_seconds(broker.pid) - cpu_before
    produce_client_s = time.process_time() - client_before
    requests_between = request_counts(metrics_url)
    how = "subscribed to the topic" if subscribe else "assigned every partition"
    say(f"round {i}: consuming every partition with one consumer of the group ({how})")
    cpu_before, client_before = cpu_seconds(broker.pid), time.process_time()
    consume_s, read, round_errors, assignment_s = consume_all(
        broker.bootstrap, TOPIC, partitions, count, say,
        lambda: peak.append(open_fds(broker.pid)), subscribe=subscribe)
    consume_cpu_s = cpu_seconds(broker.pid) - cpu_before
    consume_client_s = time.process_time() - client_before
    requests_after = request_counts(metrics_url)
    errors.extend(round_errors)
    row = {"round": i, "produce_s": produce_s, "produce_records_per_s": count / produce_s,
           "produce_broker_cpu_s": produce_cpu_s, "produce_client_cpu_s": produce_client_s,
           "consume_s": consume_s, "consume_records_per_s": read / consume_s,
           "consume_broker_cpu_s": consume_cpu_s, "consume_client_cpu_s": consume_client_s,
           "consume_assignment_s": assignment_s,
           "records_read": read, "load_average": os.getloadavg()[0],
           "produce_requests": count_difference(requests_between, requests_before),
           "consume_requests": count_difference(requests_after, requests_between)}
    say(f"  produced {row['produce_records_per_s']:,.0f} records/s (CPU: broker {produce_cpu_s:.1f} s, "
        f"client {produce_client_s:.1f} s), consumed {row['consume_records_per_s']:,.0f} records/s "
        f"(CPU: broker {consume_cpu_s:.1f} s, client {consume_client_s:.1f} s; every partition "
        f"held after {assignment_s:.2f} s)")
    say(f"  requests: produce {_counts(row['produce_requests'])}; consume {_counts(row['consume_requests'])}")
    return row


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count:,}" for name, count in counts.items()) or "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=None,
                        help="records per partition a round (default: 200,000 records a round "
                             "over the partitions, at least 10 each)")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3,
                        help="produce/consume rounds after the first (the steady state)")
    parser.add_argument("--consumer", choices=("assign", "subscribe"), default="assign",
                        help="the consumer is assigned every partition (no rebalance), or "
                             "subscribes and the group gives it every partition (a rebalance "
                             "of them all each round)")
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--data-dir", default=None,
                        help="parent of the broker's data dir (default: a temp dir); the "
                             "filesystem's own cost of creating files shows in the creation time")
    parser.add_argument("--out", default=None,
                        help="results dir (default: bench/scale/last-run-<partitions>)")
    args = parser.parse_args(argv)
    if args.records is None:
        args.records = max(10, -(-ROUND_RECORDS // args.partitions))
    if args.out is None:
        suffix = "-subscribe" if args.consumer == "subscribe" else ""
        args.out = str(Path(__file__).parent / f"last-run-{args.partitions}{suffix}")
    workdir = tempfile.mkdtemp(prefix="pykfk-scale-", dir=args.data_dir)
    try:
        result = run(args.partitions, args.records, args.value_size, args.idle_seconds,
                     max(args.rounds, 1), workdir, args.consumer == "subscribe")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["checks"] = check_targets(result)
    result["verdict"] = steady_state_verdict(result)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "scale.png"))
    print_table(result)
    print_verdict(result)
    return 0 if all(check["passed"] for check in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
