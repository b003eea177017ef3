"""python -m bench.mirror [--records 300000] [--value-bytes 200] [--partitions 6] [--fast]

Two standalone brokers; one topic in the first filled with keyed records (with a
header); then, each alone: a plain confluent-kafka consume-and-produce loop, the mirror
at least once, and the mirror exactly once (transactions), copying the whole topic into
the second broker. Prints records/s, MB/s (key + value bytes) and CPU seconds per MB of
each, and their ratios (mirror / plain, exactly once / at least once); writes
results.json (``results`` holds plain and mirror, ``exactly_once`` the transactional run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pykfk.testing import BrokerProcess

TOPIC = "bench-mirror"
ROOT = Path(__file__).resolve().parents[2]


def _fill(bootstrap: str, args: argparse.Namespace) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                         "queue.buffering.max.messages": 1_000_000})
    value = b"v" * args.value_bytes
    for i in range(args.records):
        while True:
            try:
                producer.produce(TOPIC, value, b"key-%d" % i, i % args.partitions, headers=[("h", b"1")])
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _worker(kind: str, source: str, target: str, args: argparse.Namespace) -> dict[str, Any]:
    if kind == "plain":
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": target})
        admin.create_topics([NewTopic("plain-copy", args.partitions, 1)])["plain-copy"].result(30)
    command = [sys.executable, "-m", "bench.mirror.workers", kind, "--source", source, "--target", target,
               "--topic", TOPIC, "--target-topic", "plain-copy", "--records", str(args.records)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    mb = result["bytes"] / 1e6
    result.update(kind=kind, records_per_s=result["records"] / result["seconds"],
                  mb_per_s=mb / result["seconds"], cpu_s_per_mb=result["cpu_s"] / mb)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mirror")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--fast", action="store_true", help="a smoke run: 20,000 records")
    parser.add_argument("--out", default=str(ROOT / "bench" / "mirror" / "last-run"))
    args = parser.parse_args(argv)
    if args.fast:
        args.records = 20_000
    with tempfile.TemporaryDirectory(prefix="bench-mirror-") as workdir:
        source = BrokerProcess(os.path.join(workdir, "source"), {"group.initial.rebalance.delay.ms": 0},
                               log_level="WARNING").start()
        target = BrokerProcess(os.path.join(workdir, "target"), {"group.initial.rebalance.delay.ms": 0},
                               log_level="WARNING").start()
        try:
            began = time.monotonic()
            _fill(source.bootstrap, args)
            print(f"filled {args.records} records in {time.monotonic() - began:.1f} s", file=sys.stderr)
            results = [_worker(kind, source.bootstrap, target.bootstrap, args)
                       for kind in ("plain", "mirror", "mirror-exactly-once")]
        finally:
            source.stop()
            target.stop()
    plain, mirror, exactly_once = results
    results = [plain, mirror]
    summary = {
        "machine": platform.node(), "cpus": os.cpu_count(), "records": args.records,
        "value_bytes": args.value_bytes, "partitions": args.partitions, "results": results,
        "throughput_ratio": mirror["records_per_s"] / plain["records_per_s"],
        "cpu_per_mb_ratio": mirror["cpu_s_per_mb"] / plain["cpu_s_per_mb"],
        "exactly_once": exactly_once,
        "exactly_once_throughput_ratio": exactly_once["records_per_s"] / mirror["records_per_s"],
        "exactly_once_cpu_per_mb_ratio": exactly_once["cpu_s_per_mb"] / mirror["cpu_s_per_mb"],
    }
    print(f"{'copier':<20} {'records/s':>12} {'MB/s':>8} {'CPU s/MB':>10}")
    for r in (plain, mirror, exactly_once):
        print(f"{r['kind']:<20} {r['records_per_s']:>12,.0f} {r['mb_per_s']:>8.2f} {r['cpu_s_per_mb']:>10.3f}")
    print(f"mirror / plain: throughput {summary['throughput_ratio']:.2f}, "
          f"CPU per MB {summary['cpu_per_mb_ratio']:.2f}")
    print(f"exactly once / at least once: throughput {summary['exactly_once_throughput_ratio']:.2f}, "
          f"CPU per MB {summary['exactly_once_cpu_per_mb_ratio']:.2f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
