"""python -m bench.share [--records 100000] [--size 200] [--runs 3]

Queues: a share group (KIP-932) against RabbitMQ, the 2011 paper's queue peer, and
against a classic consumer group reading the same topic, on one machine in one run.

One pykfk broker (no fsync, as in bench.paper) holds a one-partition topic of
``--records`` records of ``--size`` bytes; a RabbitMQ node of our own (bench.paper's
RabbitMQService: durable classic queue, persistent messages) gets the same messages
before each of its rounds. Per round, in turn:

- share: confluent-kafka's ShareConsumer in explicit mode, a new share group starting at
  the earliest record, ``acknowledge(ACCEPT)`` of every record (the acknowledgements ride
  on the next ShareFetch; the broker stores the share-partition state before answering),
  and ``commit_sync`` at the end;
- classic: confluent-kafka's Consumer in a new classic group, offsets committed
  automatically (every 5 s, librdkafka's default);
- rabbitmq: pika, prefetch 1000, ``basic_ack`` of every message on its own (no
  ``multiple``).

Timed from the first record received to the last (plus the final commit or ack), so
joining a group is left out. Reported: records/s and the broker process's CPU
microseconds per record (from /proc over the timed part), medians of ``--runs``, with
ratios; ``results.json`` and ``share.png`` go to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.paper.systems import RabbitMQService
from bench.scale.probes import cpu_seconds
from pykfk.testing import BrokerProcess

SYSTEMS = ("share", "classic", "rabbitmq")
TOPIC = "bench-queue"
MAX_SECONDS = 300


class Clock:
    """Wall and broker CPU from the first record received (``start``) to ``stop``."""

    def __init__(self, pid: int):
        self.pid = pid
        self.t0 = self.cpu0 = 0.0

    def start(self) -> None:
        if not self.t0:
            self.t0, self.cpu0 = time.monotonic(), cpu_seconds(self.pid)

    def stop(self, records: int) -> dict[str, float]:
        seconds, cpu = time.monotonic() - self.t0, cpu_seconds(self.pid) - self.cpu0
        return {"records_per_s": records / seconds, "broker_cpu_us_per_record": cpu / records * 1e6,
                "seconds": seconds}


def _share(bootstrap: str, group: str, count: int, clock: Clock) -> int:
    from confluent_kafka import AcknowledgeType, ShareConsumer
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    resource = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer comes
    admin.incremental_alter_configs([resource])[resource].result(20)
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    seen: set[int] = set()
    deadline = time.monotonic() + MAX_SECONDS
    try:
        while len(seen) < count and time.monotonic() < deadline:
            messages = consumer.poll(0.5) or []
            if messages:
                clock.start()
            for message in messages:
                if message.error() is None:
                    consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                    seen.add(message.offset())
        consumer.commit_sync()
    finally:
        consumer.close()
    return len(seen)


def _classic(bootstrap: str, group: str, count: int, clock: Clock) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 5, "fetch.queue.backoff.ms": 10})
    consumer.subscribe([TOPIC])
    got, deadline = 0, time.monotonic() + MAX_SECONDS
    try:
        while got < count and time.monotonic() < deadline:
            messages = consumer.consume(10_000, 0.5)
            if messages:
                clock.start()
            got += sum(1 for m in messages if m.error() is None)
    finally:
        consumer.close()
    return got


def _fill_rabbitmq(port: int, queue: str, count: int, value: bytes) -> None:
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.queue_declare(queue, durable=True)
    properties = pika.BasicProperties(delivery_mode=2)
    for _ in range(count):
        channel.basic_publish("", queue, value, properties)
    deadline = time.monotonic() + 120
    while channel.queue_declare(queue, passive=True).method.message_count < count:
        if time.monotonic() > deadline:
            raise RuntimeError("RabbitMQ did not take every message")
        time.sleep(0.05)
    connection.close()


def _rabbitmq(port: int, queue: str, count: int, clock: Clock) -> int:
    import pika

    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
    channel = connection.channel()
    channel.basic_qos(prefetch_count=1000)
    got = 0
    for method, _properties, _body in channel.consume(queue, inactivity_timeout=10):
        if method is None:
            break
        clock.start()
        channel.basic_ack(method.delivery_tag)  # each message on its own
        got += 1
        if got >= count:
            break
    channel.cancel()
    connection.close()  # the acks are flushed before the connection closes
    return got


def _produce(bootstrap: str, count: int, value: bytes) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held until the answer comes
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(20)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    for _ in range(count):
        while True:
            try:
                producer.produce(TOPIC, value)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("records left undelivered")


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="pykfk-share-bench-"))
    broker = BrokerProcess(str(workdir / "pykfk"), {
        "log.flush.interval.messages": 2**63 - 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "group.initial.rebalance.delay.ms": 0,
    }, log_level="WARNING").start()
    rabbitmq = RabbitMQService(str(workdir))
    if "rabbitmq" in args.systems:
        rabbitmq.start()
    value = os.urandom(args.size)
    systems = [name for name in SYSTEMS if name in args.systems.split(",")]
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in systems}
    try:
        _produce(broker.bootstrap, args.records, value)
        for round_no in range(args.runs):
            for name in systems:
                queue = f"bench-{round_no}"
                if name == "rabbitmq":
                    _fill_rabbitmq(rabbitmq.port, queue, args.records, value)
                pid = rabbitmq.pid if name == "rabbitmq" else broker.pid
                assert pid is not None
                clock = Clock(pid)
                if name == "share":
                    got = _share(broker.bootstrap, f"share-{round_no}", args.records, clock)
                elif name == "classic":
                    got = _classic(broker.bootstrap, f"classic-{round_no}", args.records, clock)
                else:
                    got = _rabbitmq(rabbitmq.port, queue, args.records, clock)
                if got < args.records:
                    raise RuntimeError(f"{name}: {got} of {args.records} records")
                result = clock.stop(got)
                runs[name].append(result)
                print(f"run {round_no + 1}/{args.runs} {name:9s} {result['records_per_s']:9,.0f} records/s "
                      f"{result['broker_cpu_us_per_record']:6.2f} us broker CPU/record", flush=True)
    finally:
        broker.stop()
        rabbitmq.stop()
        shutil.rmtree(workdir, ignore_errors=True)  # both systems' data: the results are printed
    medians = {name: {key: statistics.median(r[key] for r in items) for key in items[0]}
               for name, items in runs.items()}
    return {"records": args.records, "size": args.size, "runs": runs, "medians": medians,
            "load_average": os.getloadavg()}


def report(result: dict[str, Any], out: Path) -> None:
    medians = result["medians"]
    print(f"\n{result['records']:,} records of {result['size']} B, medians of {len(result['runs']['share'])} runs, "
          f"load average {' '.join(f'{x:.1f}' for x in result['load_average'])}")
    print(f"{'system':9s} {'records/s':>10s} {'share/x':>8s} {'us CPU/rec':>11s} {'share/x':>8s}")
    share = medians.get("share")
    for name, m in medians.items():
        if share is None:
            break
        cpu = m["broker_cpu_us_per_record"]  # 0 when the run took less than one clock tick
        cpu_ratio = f"{share['broker_cpu_us_per_record'] / cpu:8.2f}" if cpu else f"{'-':>8s}"
        print(f"{name:9s} {m['records_per_s']:10,.0f} {share['records_per_s'] / m['records_per_s']:8.2f} "
              f"{cpu:11.2f} {cpu_ratio}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(result, indent=2))
    _plot(medians, out / "share.png")


def _plot(medians: dict[str, dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    names = list(medians)
    for ax, key, title in [(axes[0], "records_per_s", "records/s"),
                           (axes[1], "broker_cpu_us_per_record", "broker CPU per record (us)")]:
        values = [medians[n][key] for n in names]
        ax.bar(names, values, color=["tab:blue", "tab:gray", "tab:orange"][:len(names)])
        if all(values):
            ax.set_yscale("log")
            ax.set_ylabel("log scale")
        for x, value in enumerate(values):
            ax.annotate(f"{value:,.0f}" if value >= 100 else f"{value:.2f}", (x, value), ha="center", va="bottom")
        ax.set_title(title)
    fig.suptitle("share group (ACCEPT per record) / classic group / RabbitMQ (basic_ack per message)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.share", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of " + ", ".join(SYSTEMS))
    parser.add_argument("--report-only", metavar="DIR", help="redraw from DIR/results.json")
    parser.add_argument("--out", default=str(Path(__file__).parent / "last-run"))
    args = parser.parse_args(argv)
    if args.report_only:
        report(json.loads((Path(args.report_only) / "results.json").read_text()), Path(args.report_only))
        return 0
    report(run(args), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
