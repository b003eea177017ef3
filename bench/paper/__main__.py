"""``python -m bench.paper``: the 2011 Kafka paper's producer and consumer experiments,
pykfk side by side with RabbitMQ and ActiveMQ, on this machine, in one run.

    python -m bench.paper                       # N=1M, 200-byte messages, 3 runs each
    python -m bench.paper --quick               # tiny N, one run: the CI smoke pass
    python -m bench.paper -n 200000 --runs 5 --systems pykfk,mock --clients confluent

Each system is started on 127.0.0.1 by this command and stopped by PID when its runs are
done. Results (results.md, results.json, PNG plots, client logs) go to
bench/results/<timestamp>/ unless ``--out`` says otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import IO, Any

from bench.paper import report, systems
from bench.paper.runner import (
    REPO,
    Run,
    count_batches,
    java_command,
    python_command,
    run_child,
    settle_bytes,
)

# Which clients drive which system. "mock" is confluent-kafka against librdkafka's
# in-process mock cluster: the client's own ceiling, with no broker process at all.
CLIENTS = {
    "pykfk": ["confluent", "kafka-python", "pykfk"],
    "mock": ["confluent"],
    "rabbitmq": ["java", "pika"],
    "activemq": ["java", "stomp"],
}
SYSTEM_ORDER = ["pykfk", "mock", "rabbitmq", "activemq"]
# pika and stomp.py publish one message at a time with no waiting whatever is asked, so
# only their batch-1 test is run (the Java clients show the peers' grouped modes).
ONLY_BATCH_1 = {"pika", "stomp"}
# The consumer test reads what this producer test wrote (the paper's batch of 50).
CONSUME_SOURCE = "50"


@dataclass
class Options:
    n: int
    size: int
    batches: list[str]
    runs: int
    max_seconds: float
    fetch_bytes: int
    acks: int
    systems: list[str]
    clients: set[str] | None
    progress: bool
    out: str
    workdir: str | None
    keep: bool


def parse_args(argv: list[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m bench.paper", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--messages", type=int, default=1_000_000,
                   help="messages per producer run (default 1,000,000; the paper: 10M)")
    p.add_argument("--size", type=int, default=200, help="message size in bytes (default 200)")
    p.add_argument("--batches", default="1,50,default",
                   help="producer batch settings, comma-separated: 1, 50, default")
    p.add_argument("--runs", type=int, default=3, help="runs of each test (default 3)")
    p.add_argument("--max-seconds", type=float, default=60.0,
                   help="a run stops after this long even if N was not reached (default 60)")
    p.add_argument("--fetch-bytes", type=int, default=200 * 1024,
                   help="consumer bytes per partition fetch (the paper: ~200 KB)")
    p.add_argument("--acks", type=int, default=1, choices=(0, 1, -1),
                   help="Kafka producers' acks (default 1: the leader appended it)")
    p.add_argument("--systems", default=",".join(SYSTEM_ORDER),
                   help="systems to run: pykfk, mock, rabbitmq, activemq")
    p.add_argument("--clients", default=None,
                   help="only these clients: confluent, kafka-python, pykfk, java, pika, stomp")
    p.add_argument("--quick", action="store_true",
                   help="tiny N, one run, short caps: checks the harness, not performance")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--out", default=None, help="results folder (default bench/results/<time>)")
    p.add_argument("--workdir", default=None,
                   help="parent dir of the brokers' data dirs (default: a new temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the brokers' data dirs")
    p.add_argument("--report-only", metavar="DIR", default=None,
                   help="redraw results.md and the plots of DIR from its results.json")
    a = p.parse_args(argv)
    if a.report_only:
        runs, meta = report.load_runs(os.path.join(a.report_only, "results.json"))
        print(report.write(a.report_only, runs, meta))
        sys.exit(0)
    if a.quick:
        a.messages = min(a.messages, 2000)
        a.runs = 1
        a.max_seconds = min(a.max_seconds, 20.0)
    batches = [b.strip() for b in a.batches.split(",") if b.strip()]
    for b in batches:
        if b not in ("1", "50", "default"):
            p.error(f"unknown batch setting {b!r}")
    chosen = [s.strip() for s in a.systems.split(",") if s.strip()]
    for s in chosen:
        if s not in CLIENTS:
            p.error(f"unknown system {s!r}")
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Options(
        n=a.messages, size=a.size, batches=batches, runs=a.runs, max_seconds=a.max_seconds,
        fetch_bytes=a.fetch_bytes, acks=a.acks, systems=[s for s in SYSTEM_ORDER if s in chosen],
        clients=None if a.clients is None else {c.strip() for c in a.clients.split(",")},
        progress=not a.no_progress,
        out=a.out or os.path.join(REPO, "bench", "results", stamp), workdir=a.workdir, keep=a.keep,
    )


class Experiment:
    def __init__(self, opts: Options):
        self.opts = opts
        self.runs: list[Run] = []
        self.skipped: list[str] = []
        self.config_notes: dict[str, str] = {}
        os.makedirs(opts.out, exist_ok=True)
        if opts.workdir:
            os.makedirs(opts.workdir, exist_ok=True)
        self.workdir = tempfile.mkdtemp(prefix="pykfk-paper-", dir=opts.workdir)
        self.log: IO[str] = open(  # noqa: SIM115 - open for the whole experiment, closed in close()
            os.path.join(opts.out, "clients.log"), "a", encoding="utf-8")
        self.java_classpath: str | None = None

    # -------------------------------------------------------------- plumbing

    def clients_for(self, system: str) -> list[str]:
        chosen = [c for c in CLIENTS[system] if self.opts.clients is None or c in self.opts.clients]
        if system in ("rabbitmq", "activemq") and "java" in chosen and self._java() is None:
            self.skipped.append(f"{system}/java: javac or the Debian client jars are missing")
            chosen.remove("java")
        return chosen

    def _java(self) -> str | None:
        if self.java_classpath is None:
            if not (systems.java_client_available("rabbitmq") and systems.java_client_available("activemq")):
                return None
            self.java_classpath = systems.compile_java_client(os.path.join(self.workdir, "java"))
        return self.java_classpath

    def timeout(self) -> float:
        return self.opts.max_seconds + 300

    def spec(self, client: str, role: str, bootstrap: str, topic: str, n: int, batch: str) -> dict[str, Any]:
        return {"client": client, "role": role, "bootstrap": bootstrap, "topic": topic, "n": n,
                "size": self.opts.size, "batch": batch, "max_seconds": self.opts.max_seconds,
                "fetch_bytes": self.opts.fetch_bytes, "acks": self.opts.acks}

    def command(self, system: str, client: str, role: str, service: systems.Service | None,
                topic: str, n: int, batch: str) -> list[str]:
        if client == "java":
            assert service is not None and self.java_classpath is not None
            return java_command(self.java_classpath, system, role, service.host, service.port,
                                topic, n, self.opts.size, batch, self.opts.max_seconds)
        if service is None:
            bootstrap = ""
        elif client == "stomp":
            bootstrap = f"{service.host}:{service.stomp_port}"  # type: ignore[attr-defined]
        else:
            bootstrap = f"{service.host}:{service.port}"
        return python_command(self.spec(client, role, bootstrap, topic, n, batch))

    def one_run(self, system: str, client: str, test: str, rep: int, n: int,
                service: systems.Service | None, cmd: list[str]) -> Run:
        run = Run(system=system, client=client, test=test, rep=rep, n=n, size=self.opts.size)
        self.log.write(f"--- {system}/{client} {test} run {rep + 1}\n")
        self.log.flush()
        run_child(cmd, run, service.pid if service else None, self.log, self.opts.progress,
                  self.timeout())
        self.runs.append(run)
        status = f"{run.msgs_per_s:>12,.0f} msg/s {run.mb_per_s:8.1f} MB/s  ({run.count} in {run.seconds:.2f}s)"
        print(f"{system:>9}/{client:<12} {test:<16} #{rep + 1}: {status}"
              + (f"  ERROR {run.error}" if run.error else ""), flush=True)
        return run

    def drop(self, system: str, service: systems.Service, topic: str) -> None:
        """Free what a finished run stored (each run writes to its own topic/queue)."""
        with contextlib.suppress(Exception):
            if system == "pykfk":
                from confluent_kafka.admin import AdminClient

                admin = AdminClient({"bootstrap.servers": f"{service.host}:{service.port}"})
                for future in admin.delete_topics([topic], operation_timeout=30).values():
                    future.result(60)
            elif self._java() is not None:
                cmd = java_command(self.java_classpath, system, "drop", service.host,  # type: ignore[arg-type]
                                   service.port, topic, 0, self.opts.size, "1", 60)
                subprocess.run(cmd, capture_output=True, timeout=120, check=False)

    # -------------------------------------------------------------- the experiment

    def run_system(self, system: str) -> None:
        clients = self.clients_for(system)
        if not clients:
            return
        service = self.make_service(system)
        if service is None and system != "mock":
            return
        try:
            if service is not None:
                service.start()
                self.config_notes[system] = service.config_note
            else:
                self.config_notes[system] = "librdkafka mock cluster (test.mock.num.brokers=1), in the client process"
            fresh_store = True
            for rep in range(self.opts.runs):
                for client in clients:
                    fresh_store = self.run_client(system, client, rep, service, fresh_store)
        finally:
            if service is not None:
                service.stop()

    def make_service(self, system: str) -> systems.Service | None:
        root = os.path.join(self.workdir, system)
        if system == "pykfk":
            return systems.PykfkService(root)
        if system == "rabbitmq":
            if not systems.rabbitmq_available():
                self.skipped.append("rabbitmq: rabbitmq-server is not installed")
                return None
            return systems.RabbitMQService(root)
        if system == "activemq":
            if not systems.activemq_available():
                self.skipped.append("activemq: activemq is not installed")
                return None
            return systems.ActiveMQService(root)
        return None

    def run_client(self, system: str, client: str, rep: int, service: systems.Service | None,
                   fresh_store: bool) -> bool:
        """Producer tests (one topic each), then the consumer test on the batch-50 topic
        (or the first one the client ran).
        Returns whether the peer's store is still untouched by deletions."""
        source: tuple[str, int] | None = None
        batches = [b for b in self.opts.batches if client not in ONLY_BATCH_1 or b == "1"]
        if not batches:
            return fresh_store
        source_batch = CONSUME_SOURCE if CONSUME_SOURCE in batches else batches[0]
        for batch in batches:
            topic = re.sub(r"[^a-zA-Z0-9_-]", "_", f"paper-{client}-b{batch}-r{rep}")
            baseline = None
            peer = system in ("rabbitmq", "activemq")
            if peer and fresh_store and service is not None:
                baseline = settle_bytes(lambda: systems.allocated_bytes(service.data_dir))
            cmd = self.command(system, client, "produce", service, topic, self.opts.n, batch)
            run = self.one_run(system, client, f"produce b{batch}", rep, self.opts.n, service, cmd)
            if system == "pykfk" and service is not None:
                pdir = service.partition_dir(topic)  # type: ignore[attr-defined]
                if os.path.isdir(pdir):
                    run.disk_bytes = systems.allocated_bytes(pdir)
                    run.stored_records, run.stored_batches = count_batches(pdir)
            elif baseline is not None and service is not None and not run.error:
                # A peer keeps all queues in one store: the growth of a store nothing was
                # deleted from yet is this run's (measured once per broker start).
                run.disk_bytes = settle_bytes(lambda: systems.allocated_bytes(service.data_dir)) - baseline
                run.stored_records = run.count
            if batch == source_batch and not run.error:
                source = (topic, run.stored_records if run.stored_records is not None else run.count)
            elif service is not None:
                self.drop(system, service, topic)
                fresh_store = False
        if source is None:
            return fresh_store
        topic, available = source
        n = min(self.opts.n, available) if system != "mock" else self.opts.n
        cmd = self.command(system, client, "consume", service, topic, n, source_batch)
        if system == "pykfk" and client == "pykfk" and not _pykfk_consumer_available():
            self.skipped.append("pykfk/pykfk consume: pykfk.consumer is not available yet")
        else:
            self.one_run(system, client, "consume", rep, n, service, cmd)
        if service is not None:
            self.drop(system, service, topic)
            fresh_store = False
        return fresh_store

    def close(self) -> None:
        self.log.close()
        if not self.opts.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _pykfk_consumer_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("pykfk.consumer") is not None


def machine_facts() -> dict[str, Any]:
    def cmd(*args: str) -> str:
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=REPO,
                                  check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    cpu = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    versions: dict[str, str] = {}
    for module in ("confluent_kafka", "kafka", "pika", "stomp"):
        with contextlib.suppress(Exception):
            versions[module] = __import__(module).__version__
    with contextlib.suppress(Exception):
        import confluent_kafka

        versions["librdkafka"] = confluent_kafka.libversion()[0]
    for pkg in ("rabbitmq-server", "activemq", "openjdk-17-jre-headless"):
        v = cmd("dpkg-query", "-W", "-f=${Version}", pkg)
        if v:
            versions[pkg] = v
    return {
        "commit": cmd("git", "rev-parse", "--short", "HEAD"),
        "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
        "kernel": platform.release(), "versions": versions,
    }


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    # Unwind like Ctrl-C, so every broker and client started so far is stopped.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.signal(signal.SIGINT, _exit_on_sigterm)
    facts = machine_facts()
    facts["load_start"] = os.getloadavg()
    facts["started"] = dt.datetime.now().isoformat(timespec="seconds")
    exp = Experiment(opts)
    print(f"results -> {opts.out}", flush=True)
    try:
        for system in opts.systems:
            exp.run_system(system)
    finally:
        exp.close()
        facts["load_end"] = os.getloadavg()
        facts["finished"] = dt.datetime.now().isoformat(timespec="seconds")
        meta = {"options": opts.__dict__ | {"clients": sorted(opts.clients) if opts.clients else None},
                "machine": facts, "skipped": exp.skipped, "config": exp.config_notes}
        with open(os.path.join(opts.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump({"meta": meta, "runs": [r.to_json() for r in exp.runs]}, f, indent=1)
        markdown = report.write(opts.out, exp.runs, meta)
        print(markdown)
    failed = [r for r in exp.runs if r.error]
    return 1 if failed or not exp.runs else 0


if __name__ == "__main__":
    sys.exit(main())
