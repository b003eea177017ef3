"""The producer and consumer processes: ``python -m bench.latency.workers producer|consumer``.

They talk to the orchestrator through files in a run directory: the producer of a mock
run writes the mock cluster's address (``mock-address``); the consumer writes ``ready``
once assigned; the orchestrator writes ``go`` holding the start time (monotonic ns);
each worker writes its results as JSON when done.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import time
from array import array
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

SEND_TIME = struct.Struct(">q")
VALUE = bytes(1024)
POLL_FILE_S = 0.01


def _wait_for_file(path: str, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout_s} s")
        time.sleep(POLL_FILE_S)
    with open(path, encoding="ascii") as f:
        return f.read().strip()


def _write(path: str, text: str) -> None:
    with open(path + ".tmp", "w", encoding="ascii") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


class RequestCounter:
    """Requests this client sent to brokers, from librdkafka's statistics (sum of the
    brokers' ``tx``, and of their Produce and Fetch counts in ``req``), sampled with
    their timestamps."""

    def __init__(self) -> None:
        # (monotonic ns, requests so far, Produce requests so far, Fetch requests so far)
        self.samples: list[tuple[int, int, int, int]] = []
        self.mock_address: str | None = None

    def on_stats(self, text: str) -> None:
        stats = json.loads(text)
        brokers = stats.get("brokers", {}).values()
        self.samples.append((time.monotonic_ns(), sum(b.get("tx", 0) for b in brokers),
                             sum(b.get("req", {}).get("Produce", 0) for b in brokers),
                             sum(b.get("req", {}).get("Fetch", 0) for b in brokers)))
        if self.mock_address is None:
            for broker in brokers:
                if broker.get("nodeid", -1) >= 0:
                    self.mock_address = broker["nodename"]


def run_producer(args: argparse.Namespace) -> dict[str, Any]:
    counter = RequestCounter()
    conf = {"bootstrap.servers": args.bootstrap, "acks": "all", "linger.ms": 1,
            "statistics.interval.ms": 500, "stats_cb": counter.on_stats, "log_level": 2}
    if args.mock:
        conf["test.mock.num.brokers"] = 1
    producer = Producer(conf)
    if args.mock:
        producer.produce(args.topic, b"", key=SEND_TIME.pack(0))   # creates the topic
        producer.flush(10)
        while counter.mock_address is None:
            producer.poll(0.1)
        _write(os.path.join(args.run_dir, "mock-address"), counter.mock_address)
    start = int(_wait_for_file(os.path.join(args.run_dir, "go"), 120))
    return _send_at_rate(producer, args, start, counter)


def _send_at_rate(producer: Producer, args: argparse.Namespace, start: int,
                  counter: RequestCounter) -> dict[str, Any]:
    interval = 1_000_000_000 // args.rate
    window_start = start + int(args.warmup * 1e9)
    end = window_start + int(args.seconds * 1e9)
    acks = array("q")
    failed = [0]

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed[0] += 1
            return
        sent = SEND_TIME.unpack(msg.key())[0]
        if sent >= window_start:
            acks.append(time.monotonic_ns() - sent)

    sent = 0
    next_report = start + 1_000_000_000
    while True:
        now = time.monotonic_ns()
        if now >= end:
            break
        due = start + sent * interval
        if due > now:
            producer.poll(0)
            if due - now > 200_000:
                time.sleep((due - now - 100_000) / 1e9)
            continue
        while due <= now and sent < args.rate * (args.warmup + args.seconds):
            try:
                producer.produce(args.topic, VALUE, key=SEND_TIME.pack(time.monotonic_ns()),
                                 on_delivery=delivered)
            except BufferError:
                producer.poll(0.001)
                break
            sent += 1
            due = start + sent * interval
        producer.poll(0)
        if now >= next_report:
            next_report += 1_000_000_000
            print(f"producer: {sent:,} sent, {len(acks):,} acked in the window", flush=True)
    producer.flush(30)
    return {"sent": sent, "failed": failed[0], "ack_ns": acks.tolist(),
            "requests": counter.samples, "window": [window_start, end]}


def run_consumer(args: argparse.Namespace) -> dict[str, Any]:
    bootstrap = args.bootstrap
    if args.mock:
        bootstrap = _wait_for_file(os.path.join(args.run_dir, "mock-address"), 60)
    counter = RequestCounter()
    conf = {"bootstrap.servers": bootstrap, "group.id": f"latency-{os.getpid()}",
            "enable.auto.commit": False, "statistics.interval.ms": 500,
            "stats_cb": counter.on_stats, "log_level": 2}
    if args.mock:
        # The mock answers a fetch only at fetch.wait.max.ms (no wake-up on new data):
        # poll it at 1 ms so it shows the clients' own floor, not its wait.
        conf["fetch.wait.max.ms"] = 1
    consumer = Consumer(conf)
    metadata = consumer.list_topics(args.topic, timeout=30)
    partitions = sorted(metadata.topics[args.topic].partitions)
    consumer.assign([TopicPartition(args.topic, p, -1) for p in partitions])  # from the end
    consumer.consume(1, 1.0)
    _write(os.path.join(args.run_dir, "ready"), str(len(partitions)))
    start = int(_wait_for_file(os.path.join(args.run_dir, "go"), 120))
    window_start = start + int(args.warmup * 1e9)
    end = window_start + int(args.seconds * 1e9)
    latencies = array("q")
    received = 0
    # Read until the window's records are in (a few seconds after the producer stops).
    # poll(), not consume(n, timeout): the latter waits for n records or the timeout,
    # which would count the client's batching as latency.
    while time.monotonic_ns() < end + 5_000_000_000:
        message = consumer.poll(0.1)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() != KafkaError._PARTITION_EOF:
                print(f"consumer: {message.error()}", file=sys.stderr, flush=True)
            continue
        now = time.monotonic_ns()
        sent = SEND_TIME.unpack(message.key())[0]
        received += 1
        if window_start <= sent < end:
            latencies.append(now - sent)
    consumer.close()
    return {"received": received, "end_to_end_ns": latencies.tolist(),
            "requests": counter.samples, "partitions": len(partitions)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.latency.workers")
    parser.add_argument("role", choices=["producer", "consumer"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--rate", type=int, required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--warmup", type=float, required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--mock", action="store_true")
    args = parser.parse_args(argv)
    result = run_producer(args) if args.role == "producer" else run_consumer(args)
    with open(os.path.join(args.run_dir, f"{args.role}.json"), "w", encoding="ascii") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
