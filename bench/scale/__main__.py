"""python -m bench.scale [--partitions 10000] [--records N] [--rounds 3] [--out DIR]

One broker, one topic of many partitions: its creation under load, Metadata of it, then
a produce to every partition and a consumer group reading it all, and ``--rounds`` more
rounds of the same (the steady state once every partition has been read), each timed."""

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
    cpu_seconds,
    create_topic,
    idle_cpu_percent,
    metadata_round_trip_ms,
    open_fds,
    rss_mb,
)
from bench.scale.report import check_targets, plot, print_table
from bench.scale.traffic import consume_all, produce_all
from pykfk.testing import BrokerProcess, RawClient

TOPIC = "scale"
# Records a round by default, as in the produce of the issue that found the collapse.
ROUND_RECORDS = 200_000


def say(line: str) -> None:
    print(line, flush=True)


def run(partitions: int, records: int, value_size: int, idle_s: float, rounds: int,
        workdir: str) -> dict[str, Any]:
    broker = BrokerProcess(os.path.join(workdir, "data"), {"num.partitions": 1})
    broker.start()
    try:
        return measure(broker, partitions, records, value_size, idle_s, rounds)
    finally:
        broker.stop()


def measure(broker: BrokerProcess, partitions: int, records: int, value_size: int,
            idle_s: float, rounds: int) -> dict[str, Any]:
    pid = broker.pid
    result: dict[str, Any] = {"partitions": partitions, "records_per_partition": records,
                              "value_bytes": value_size, "data_dir": broker.log_dir}
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
        result["rounds"].append(traffic_round(broker, i, partitions, records, value_size, peak, errors))
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
                  peak: list[int], errors: list[str]) -> dict[str, Any]:
    """Round 0 produces to the new topic; every later one comes after the consumer group
    has read every partition (the steady state of a topic in use)."""
    count = partitions * records
    when = "to the new topic" if i == 0 else "after the group read every partition"
    say(f"round {i}: producing {records} records of {value_size} B to each partition ({when})")
    # The client's CPU (this process: the Python loop and librdkafka's threads) beside the
    # broker's tells which side a slow round waited for.
    cpu_before, client_before = cpu_seconds(broker.pid), time.process_time()
    produce_s = produce_all(broker.bootstrap, TOPIC, partitions, records, value_size, say)
    produce_cpu_s = cpu_seconds(broker.pid) - cpu_before
    produce_client_s = time.process_time() - client_before
    say(f"round {i}: consuming every partition with one consumer of the group")
    cpu_before, client_before = cpu_seconds(broker.pid), time.process_time()
    consume_s, read, round_errors = consume_all(broker.bootstrap, TOPIC, partitions, count, say,
                                                lambda: peak.append(open_fds(broker.pid)))
    consume_cpu_s = cpu_seconds(broker.pid) - cpu_before
    consume_client_s = time.process_time() - client_before
    errors.extend(round_errors)
    row = {"round": i, "produce_s": produce_s, "produce_records_per_s": count / produce_s,
           "produce_broker_cpu_s": produce_cpu_s, "produce_client_cpu_s": produce_client_s,
           "consume_s": consume_s, "consume_records_per_s": read / consume_s,
           "consume_broker_cpu_s": consume_cpu_s, "consume_client_cpu_s": consume_client_s,
           "records_read": read, "load_average": os.getloadavg()[0]}
    say(f"  produced {row['produce_records_per_s']:,.0f} records/s (CPU: broker {produce_cpu_s:.1f} s, "
        f"client {produce_client_s:.1f} s), consumed {row['consume_records_per_s']:,.0f} records/s "
        f"(CPU: broker {consume_cpu_s:.1f} s, client {consume_client_s:.1f} s)")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=None,
                        help="records per partition a round (default: 200,000 records a round "
                             "over the partitions, at least 10 each)")
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3,
                        help="produce/consume rounds after the first (the steady state)")
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
        args.out = str(Path(__file__).parent / f"last-run-{args.partitions}")
    workdir = tempfile.mkdtemp(prefix="pykfk-scale-", dir=args.data_dir)
    try:
        result = run(args.partitions, args.records, args.value_size, args.idle_seconds,
                     max(args.rounds, 1), workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    result["checks"] = check_targets(result)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    plot(result, os.path.join(args.out, "scale.png"))
    print_table(result)
    return 0 if all(check["passed"] for check in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
