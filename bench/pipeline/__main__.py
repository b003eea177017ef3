"""python -m bench.pipeline [--records 200000] [--value-bytes 200] [--partitions 6] [--faults]

The pipeline of tests/pipeline end to end at bench size: confluent-kafka producers (an
idempotent one and a transactional one, every tenth transaction aborted) -> a 3-broker
ZooKeeper cluster (replication 3, acks=all) -> ``pykfk-mirror`` exactly once -> a
standalone broker -> ``pykfk-spark-ingest`` read_committed -> Parquet, each tier run
after the previous one has finished, so each is timed alone.

Per tier: records/s (records it handled over its wall time) and CPU seconds per MB of
key + value bytes (the producer: this process; the cluster: its three brokers while the
producers write, replication included; the mirror: its process; ingest: the job's
process and the JVM it starts). ``--faults`` adds what the test does: a partition leader
killed with SIGKILL while the producers write, the mirror killed with SIGKILL once and
restarted, the ingest job killed once and run again. Prints a table, writes
results.json and pipeline.png in --out (default bench/pipeline/last-run).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from pykfk.testing import BrokerProcess, ZooKeeperServer

TOPIC = "events"
REMOTE = "a.events"
ROOT = Path(__file__).resolve().parents[2]
TICKS = os.sysconf("SC_CLK_TCK")
CLUSTER_SETTINGS = {
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 10000,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.num.partitions": 3,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "group.initial.rebalance.delay.ms": 0,
    "leader.imbalance.check.interval.seconds": 3600,
}
FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (its threads included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class TreeCpu(threading.Thread):
    """CPU seconds of a process and every descendant (a Spark job's JVM is not waited for
    by its parent, so getrusage's children miss it): /proc sampled every 0.2 s, the
    highest figure seen per pid summed."""

    def __init__(self, root: int):
        super().__init__(daemon=True)
        self.root, self.seen, self.stop = root, {}, threading.Event()

    def total(self) -> float:
        return sum(self.seen.values())

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.sample()

    def sample(self) -> None:
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    pass
        tree, grew = {self.root}, True
        while grew:
            more = {pid for pid, parent in parents.items() if parent in tree} - tree
            tree |= more
            grew = bool(more)
        for pid in tree:
            try:
                self.seen[pid] = max(self.seen.get(pid, 0.0), cpu_seconds(pid))
            except (OSError, IndexError, ValueError):
                pass


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class Progress:
    """One line every 2 s: what a tier has done so far."""

    def __init__(self, tier: str, total: int):
        self.tier, self.total, self.last = tier, total, 0.0

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last >= 2 or done >= self.total:
            self.last = now
            say(f"  {self.tier}: {done:,}/{self.total:,}")


def start_cluster(base: Path, zk: ZooKeeperServer) -> list[BrokerProcess]:
    connect = zk.connect_string(f"bench-{uuid.uuid4().hex[:8]}")
    brokers = [BrokerProcess(str(base / f"broker{i}"), {**CLUSTER_SETTINGS, "zookeeper.connect": connect,
                                                        "broker.id": i}, log_level="WARNING")
               for i in range(3)]
    for broker in brokers:
        broker.start(timeout=60)
    return brokers


def create_topic(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
    time.sleep(2)  # leaders elected everywhere


def produce(bootstrap: str, args: argparse.Namespace, brokers: list[BrokerProcess]) -> dict[str, Any]:
    """Half the records through an idempotent producer, half in transactions of 1,000
    (every tenth aborted). Returns the tier figures and the committed record count."""
    from confluent_kafka import Producer

    common = {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
              "queue.buffering.max.messages": 1_000_000, "acks": "all"}
    plain = Producer({**common, "enable.idempotence": True})
    txn = Producer({**common, "transactional.id": f"bench-{uuid.uuid4().hex[:6]}"})
    txn.init_transactions(60)
    value = b"v" * args.value_bytes
    half = args.records // 2
    progress = Progress("producer", args.records)
    killed: BrokerProcess | None = None
    committed = aborted = 0
    began, cpu0 = time.monotonic(), own_cpu()
    brokers_cpu0 = sum(cpu_seconds(b.pid) for b in brokers)
    brokers_cpu_dead = 0.0
    for i in range(half):
        while True:
            try:
                plain.produce(TOPIC, value, b"i-%d" % i, i % args.partitions)
                break
            except BufferError:
                plain.poll(0.05)
        if i % 10_000 == 0:
            progress(i)
    assert plain.flush(300) == 0
    committed += half
    for t, first in enumerate(range(0, args.records - half, 1000)):
        if args.faults and killed is None and first >= (args.records - half) // 3:
            killed = brokers[0]
            brokers_cpu_dead = cpu_seconds(killed.pid)
            say("  killing broker 0 with SIGKILL")
            killed.kill()
        n = min(1000, args.records - half - first)
        txn.begin_transaction()
        for i in range(first, first + n):
            txn.produce(TOPIC, value, b"t-%d" % i, i % args.partitions)
        if t % 10 == 9:
            txn.abort_transaction(120)
            aborted += n
        else:
            txn.commit_transaction(120)
            committed += n
        progress(half + first + n)
    elapsed, cpu = time.monotonic() - began, own_cpu() - cpu0
    brokers_cpu = sum(cpu_seconds(b.pid) for b in brokers if b.is_running()) + brokers_cpu_dead - brokers_cpu0
    if killed is not None:
        killed.start(timeout=60)
    megabytes = args.records * (args.value_bytes + 8) / 1e6
    return {"committed": committed, "aborted": aborted,
            "producer": {"records": args.records, "seconds": elapsed, "cpu_s": cpu, "mb": megabytes},
            "cluster": {"records": args.records, "seconds": elapsed, "cpu_s": brokers_cpu, "mb": megabytes}}


def last_keys(bootstrap: str, topic: str, partitions: int) -> list[bytes | None]:
    """The key of each partition's last committed record, read with read_committed from
    a little before the partition's end (None while the topic does not exist)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-tail", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    keys: list[bytes | None] = []
    try:
        for p in range(partitions):
            end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            consumer.assign([TopicPartition(topic, p, max(0, end - 2000))])
            key, deadline = None, time.monotonic() + 30
            while consumer.position([TopicPartition(topic, p)])[0].offset < end and time.monotonic() < deadline:
                for m in consumer.consume(2000, 0.5):
                    if m.error() is None:
                        key = m.key()
            keys.append(key)
    except Exception:  # noqa: BLE001 - the remote topic does not exist yet
        return [None] * partitions
    finally:
        consumer.close()
    return keys


def mirror(source: str, target: str, base: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The mirror copies the whole topic; done when the target's last stable offsets
    match the source's (what is left is markers only)."""
    import yaml

    source_last = last_keys(source, TOPIC, args.partitions)
    config = base / "mirror.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"alias": "a", "bootstrap.servers": source}, "target": {"alias": "b", "bootstrap.servers": target},
        "topics": TOPIC, "report.interval.ms": 2000, "refresh.topics.interval.ms": 2000,
        "audit.bootstrap.servers": target,
    }))
    with open(base / "mirror.log", "ab") as log:
        return _run_mirror(config, log, source_last, target, base, args)


def _run_mirror(config: Path, log: Any, source_last: list[bytes | None], target: str, base: Path,
                args: argparse.Namespace) -> dict[str, Any]:
    command = [sys.executable, "-m", "pykfk.mirror", "run", str(config), "--set", "group.instance.id=bench"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    began, cpu_before_kill, killed = time.monotonic(), 0.0, False
    progress = Progress("mirror (partitions caught up)", args.partitions)
    deadline = began + 1800
    while True:
        done = sum(a == b for a, b in zip(last_keys(target, REMOTE, args.partitions), source_last))
        progress(done)
        if done == args.partitions:
            break
        if args.faults and not killed and time.monotonic() - began > 20:
            cpu_before_kill = cpu_seconds(proc.pid)
            say("  killing the mirror with SIGKILL, starting it again")
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            proc = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            killed = True
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"the mirror did not finish; see {base / 'mirror.log'}")
        time.sleep(0.5)
    elapsed, cpu = time.monotonic() - began, cpu_before_kill + cpu_seconds(proc.pid)
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    return {"records": args.records, "seconds": elapsed, "cpu_s": cpu,
            "mb": args.records * (args.value_bytes + 8) / 1e6}


def ingest(target: str, base: Path, args: argparse.Namespace, committed: int) -> dict[str, Any]:
    output, local = base / "lake", base / "spark-local"
    local.mkdir(exist_ok=True)
    command = [sys.executable, "-m", "pykfk_spark.ingest", "--bootstrap-servers", target, "--topic", REMOTE,
               "--output", str(output), "--max-records-per-partition", "50000",
               "--audit-bootstrap-servers", target, "--audit-as", f"{REMOTE}={TOPIC}",
               "--master", "local[2]", "--conf", "spark.ui.enabled=false",
               "--conf", f"spark.local.dir={local}",
               "--conf", f"spark.driver.extraJavaOptions={FAST_JVM} -Djava.io.tmpdir={local}"]
    began, cpu = time.monotonic(), 0.0
    if args.faults:
        job = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
        assert job.stdout is not None
        meter = TreeCpu(job.pid)
        meter.start()
        for line in job.stdout:
            if "loading: " in line or "run 1: loading" in line:
                break
        meter.sample()
        say("  killing the ingest job with SIGKILL, running it again")
        os.killpg(job.pid, signal.SIGKILL)
        job.wait(30)
        meter.stop.set()
        cpu += meter.total()
    job = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    meter = TreeCpu(job.pid)
    meter.start()
    assert job.stdout is not None
    for line in job.stdout:
        if "] " in line or "total:" in line:
            say("  ingest: " + line.rstrip())
    if job.wait() != 0:
        raise RuntimeError("the ingest job failed")
    meter.stop.set()
    elapsed, cpu = time.monotonic() - began, cpu + meter.total()
    import pyarrow.dataset as ds

    rows = ds.dataset(str(output), format="parquet", partitioning="hive").count_rows()
    if rows != committed:
        raise RuntimeError(f"Parquet holds {rows} rows, {committed} records were committed")
    return {"records": committed, "seconds": elapsed, "cpu_s": cpu,
            "mb": committed * (args.value_bytes + 8) / 1e6}


def audit(target: str) -> int:
    done = subprocess.run([sys.executable, "-m", "pykfk.cli.main", "-b", target, "audit", "--settle", "0",
                           "--reference", "mirror"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    say(done.stdout.strip()[-2000:] or done.stderr.strip()[-2000:])
    return done.returncode


def table(results: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'tier':<10} {'records':>9} {'seconds':>8} {'records/s':>10} {'CPU s':>7} {'CPU s/MB':>9}"]
    for tier, r in results.items():
        lines.append(f"{tier:<10} {r['records']:>9,} {r['seconds']:>8.1f} {r['records'] / r['seconds']:>10,.0f} "
                     f"{r['cpu_s']:>7.1f} {r['cpu_s'] / r['mb']:>9.4f}")
    producer = results["producer"]
    lines.append("ratios to the producer tier (records/s, CPU s/MB): " + ", ".join(
        f"{tier} {(r['records'] / r['seconds']) / (producer['records'] / producer['seconds']):.2f} / "
        f"{(r['cpu_s'] / r['mb']) / (producer['cpu_s'] / producer['mb']):.2f}" for tier, r in results.items()
        if tier != "producer"))
    return "\n".join(lines)


def plot(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tiers = list(results)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(tiers, [results[t]["records"] / results[t]["seconds"] for t in tiers], color="tab:blue")
    left.set_title("records/s")
    right.bar(tiers, [results[t]["cpu_s"] / results[t]["mb"] for t in tiers], color="tab:orange")
    right.set_title("CPU seconds per MB")
    fig.suptitle("pykfk pipeline: producers -> cluster -> mirror -> broker -> Spark ingest")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[1])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--faults", action="store_true", help="kill a leader, the mirror and the ingest job once")
    parser.add_argument("--out", default=str(ROOT / "bench" / "pipeline" / "last-run"))
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as tmp:
        base = Path(tmp)
        zk = ZooKeeperServer(str(base / "zk")).start()
        brokers = start_cluster(base, zk)
        target = BrokerProcess(str(base / "target"), {"group.initial.rebalance.delay.ms": 0},
                               log_level="WARNING").start()
        try:
            source = ",".join(b.bootstrap for b in brokers)
            create_topic(source, args.partitions)
            say(f"producers -> cluster: {args.records:,} records of {args.value_bytes} bytes")
            produced = produce(source, args, brokers)
            say(f"mirror: {produced['committed']:,} committed, {produced['aborted']:,} aborted")
            results = {"producer": produced["producer"], "cluster": produced["cluster"],
                       "mirror": mirror(source, target.bootstrap, base, args)}
            say("ingest")
            results["ingest"] = ingest(target.bootstrap, base, args, produced["committed"])
            audit_exit = audit(target.bootstrap)
        finally:
            target.stop()
            for broker in brokers:
                broker.stop()
            zk.stop()
    print(table(results))
    plot(results, out / "pipeline.png")
    (out / "results.json").write_text(json.dumps({
        "args": vars(args), "results": results, "audit_exit": audit_exit, "load_average": os.getloadavg(),
        "machine": platform.platform(), "cpus": os.cpu_count()}, indent=2))
    print(f"audit exit {audit_exit}; wrote {out / 'results.json'} and {out / 'pipeline.png'}")


if __name__ == "__main__":
    main()
