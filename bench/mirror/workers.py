"""The copiers the mirror bench times, each alone in its own process so its CPU time
(librdkafka's threads included) is its own: ``plain`` (a consume-and-produce loop with
confluent-kafka, offsets auto-committed, nothing else), ``mirror`` (pykfk.mirror's
Mirror at least once, with progress, offset syncs and checkpoints on) and
``mirror-exactly-once`` (the same in transactions). Each prints one JSON line:
records, bytes, wall seconds from the first record to the last acknowledged, CPU seconds
over the same span."""

from __future__ import annotations

import argparse
import json
import resource
import threading
import time
from typing import Any

from confluent_kafka import Consumer, Producer

# The wait for the group to form before the first record is not part of the figures.
FIRST_RECORD_TIMEOUT_S = 60


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_plain(args: argparse.Namespace) -> dict[str, Any]:
    consumer = Consumer({"bootstrap.servers": args.source, "group.id": "bench-plain",
                         "auto.offset.reset": "earliest", "fetch.max.bytes": 16 << 20})
    producer = Producer({"bootstrap.servers": args.target, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "batch.size": 1 << 20, "queue.buffering.max.messages": 500_000,
                         "queue.buffering.max.kbytes": 512 * 1024})
    consumer.subscribe([args.topic])
    copied = size = 0
    began = cpu = None
    deadline = time.monotonic() + FIRST_RECORD_TIMEOUT_S
    while copied < args.records:
        messages = consumer.consume(2000, 0.1)
        if began is None:
            if not messages:
                if time.monotonic() > deadline:
                    raise TimeoutError("no record within the timeout")
                continue
            began, cpu = time.monotonic(), _cpu()
        for m in messages:
            if m.error() is not None:
                continue
            while True:
                try:
                    producer.produce(args.target_topic, m.value(), m.key(), m.partition(),
                                     timestamp=m.timestamp()[1], headers=m.headers())
                    break
                except BufferError:
                    producer.poll(0.05)
            copied += 1
            size += len(m.value() or b"") + len(m.key() or b"")
        producer.poll(0)
    producer.flush(60)
    result = {"records": copied, "bytes": size, "seconds": time.monotonic() - began, "cpu_s": _cpu() - cpu}
    consumer.close()
    return result


def run_mirror(args: argparse.Namespace, exactly_once: bool) -> dict[str, Any]:
    from pykfk.mirror.config import parse_config
    from pykfk.mirror.runner import Mirror

    config = parse_config({
        # Each mode under its own source alias: its own remote topic and progress.
        "source.alias": "eos" if exactly_once else "src", "source.bootstrap.servers": args.source,
        "target.alias": "dst", "target.bootstrap.servers": args.target,
        "topics": args.topic, "report.interval.ms": "600000",
        "exactly.once": "true" if exactly_once else "false",
    })
    mirror = Mirror(config, report=lambda _line: None)
    marks: dict[str, float] = {}

    def watch() -> None:
        deadline = time.monotonic() + FIRST_RECORD_TIMEOUT_S + 600
        while time.monotonic() < deadline and mirror.stats.records < args.records:
            if "began" not in marks and mirror.stats.records > 0:
                marks["began"], marks["cpu"] = time.monotonic(), _cpu()
            time.sleep(0.005)  # polling a counter, not waiting for an event
        mirror.stop()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    mirror.run(FIRST_RECORD_TIMEOUT_S + 600)  # stops after its final progress write
    ended, cpu = time.monotonic(), _cpu()
    watcher.join(5)
    return {"records": mirror.stats.records, "bytes": mirror.stats.bytes,
            "seconds": ended - marks["began"], "cpu_s": cpu - marks["cpu"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=("plain", "mirror", "mirror-exactly-once"))
    parser.add_argument("--source", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--target-topic", default="")
    parser.add_argument("--records", type=int, required=True)
    args = parser.parse_args()
    result = run_plain(args) if args.kind == "plain" else run_mirror(args, args.kind == "mirror-exactly-once")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
