"""``pykfk-spark-ingest``: load topics into Parquet, partitioned by event date and hour
(UTC), exactly once across failures and re-runs.

The offsets a run loaded are committed together with its files, and only when the whole
run succeeded; the next run starts where the last committed one ended. Layout of the
output directory (names starting with ``_`` are ignored by Parquet readers):

    date=YYYY-MM-DD/hour=HH/run000007-part-....parquet   committed data of run 7
    _offsets/000007.json        run 7's manifest: start/end offset per topic partition,
                                records and bytes per partition, its files; its presence
                                IS the commit (written to a temp name, fsynced, renamed)
    _staging/000008/data/...    run 8 in progress: Spark writes here first
    _staging/000008/PREPARED.json   run 8's manifest once its Spark job has succeeded
    _offsets/000007.audited     run 7's audit counts are published (see below)
    _lock                       flock held by the running job (one job per directory)

A run: (1) recover: a staged run with PREPARED.json is rolled forward (its files moved
into place, its manifest published), a staged run without one is deleted, and data
files of runs that have no manifest are removed; (2) plan [last end, latest) per
partition; (3) one Spark job reads the range with the ``pykfk`` source and writes
Parquet into the staging dir; (4) prepare (manifest next to the staged files); (5)
commit (move files, publish manifest). A crash anywhere before (4) leaves nothing
visible and the range is read again; a crash after (4) is completed by the next run.

Records are read read_committed by default: up to the last stable offset, without the
records of aborted transactions or the transaction markers. A run's end offsets are the
planned ones (a last stable offset or high watermark), not the last record's offset + 1,
so the next run starts right after the markers and aborted batches at the end.

Audit (``--audit-bootstrap-servers``): the manifest carries the run's counts per topic
and window, computed from the staged Parquet files, so they are counts of exactly what
the run committed. They are published after the commit under an emitter id derived from
the output, the run and its offset ranges, so publishing them again yields the same
audit record keys, which ``pykfk audit`` counts once. Every run first publishes the
counts of each committed run not yet marked ``.audited`` (a run killed after its commit,
or one whose audit cluster was down), then its own: killed at any point and run again,
the job leaves audit and Parquet agreeing.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .options import offsets_from_json, offsets_json

if TYPE_CHECKING:
    from typing_extensions import Self

TopicPartition = tuple[str, int]
Progress = Callable[[str], None]

MANIFEST_FORMAT = 1
OFFSETS_DIR = "_offsets"
STAGING_DIR = "_staging"
PREPARED = "PREPARED.json"
AUDITED_SUFFIX = ".audited"
LOCK_FILE = "_lock"
RUN_PREFIX = "run"

# Visible for testing: SIGKILL this process at a named point of the commit protocol.
CRASH_ENV = "PYKFK_INGEST_CRASH_AT"


@dataclass
class IngestConfig:
    """What to load and where. ``topics`` or ``pattern`` selects the topics;
    ``starting_offsets`` ("earliest" or "latest") applies to partitions no committed run
    has covered yet; ``max_records_per_run`` caps each partition's range per run."""

    bootstrap_servers: str
    output: str
    topics: list[str] = field(default_factory=list)
    pattern: str | None = None
    starting_offsets: str = "earliest"
    max_records_per_partition: int | None = None
    max_records_per_run: int | None = None
    fail_on_data_loss: bool = True
    compression: str = "snappy"
    # read_committed: up to the last stable offset, aborted transactions left out.
    isolation_level: str = "read_committed"
    # The audit trail (pykfk.audit): with a bootstrap, each committed run publishes its
    # records per topic and window of their timestamps, as tier ``audit_tier``;
    # ``audit_names`` reports a topic under another name (a mirrored ``east.orders``
    # as ``orders``, the name the producers counted it under).
    audit_bootstrap_servers: str | None = None
    audit_topic: str = "__pykfk_audit"
    audit_tier: str = "spark-ingest"
    audit_window_ms: int = 60_000
    audit_names: dict[str, str] = field(default_factory=dict)


@dataclass
class PartitionSummary:
    start: int
    end: int
    records: int = 0
    bytes: int = 0


@dataclass
class IngestSummary:
    run: int | None
    partitions: dict[TopicPartition, PartitionSummary]
    files: list[str]
    file_bytes: int
    seconds: float
    recovered: list[int]

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions.values())

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions.values())

    def format(self) -> str:
        lines = []
        if self.recovered:
            lines.append(f"recovered (rolled forward) runs: {', '.join(map(str, self.recovered))}")
        if self.run is None:
            lines.append("nothing new to load")
            return "\n".join(lines)
        lines.append(f"run {self.run} committed in {self.seconds:.1f}s")
        lines.append(
            f"{'topic':<24} {'part':>4} {'start':>12} {'end':>12} {'records':>12} {'bytes':>14}"
        )
        for (topic, partition), p in sorted(self.partitions.items()):
            lines.append(
                f"{topic:<24} {partition:>4} {p.start:>12} {p.end:>12} {p.records:>12} {p.bytes:>14}"
            )
        rate = self.records / self.seconds if self.seconds > 0 else 0.0
        lines.append(
            f"total: {self.records} records, {self.bytes} key+value bytes, "
            f"{len(self.files)} files ({self.file_bytes} bytes), {rate:,.0f} records/s"
        )
        return "\n".join(lines)


# ------------------------------------------------------------------- manifests


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json_atomic(path: str, doc: Any) -> None:
    """Write ``doc`` to a temp name, fsync, rename over ``path``, fsync the directory:
    afterwards the file is there whole or not at all."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(path))


def committed_runs(output: str) -> list[int]:
    directory = os.path.join(output, OFFSETS_DIR)
    if not os.path.isdir(directory):
        return []
    runs = []
    for name in os.listdir(directory):
        stem, ext = os.path.splitext(name)
        if ext == ".json" and stem.isdigit():
            runs.append(int(stem))
    return sorted(runs)


def read_manifest(output: str, run: int) -> dict:
    with open(os.path.join(output, OFFSETS_DIR, f"{run:06d}.json"), encoding="utf-8") as f:
        return json.load(f)


def committed_offsets(output: str) -> dict[TopicPartition, int]:
    """Where the next run starts: the end offsets of every partition over all committed
    runs (the latest run that covered a partition wins)."""
    ends: dict[TopicPartition, int] = {}
    for run in committed_runs(output):
        ends.update(offsets_from_json(read_manifest(output, run)["end"]))
    return ends


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def _locked(output: str) -> Iterator[None]:
    os.makedirs(output, exist_ok=True)
    with open(os.path.join(output, LOCK_FILE), "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another ingest job is running on {output}") from None
        yield


def _commit(output: str, manifest: dict, staging: str, progress: Progress) -> None:
    """Move the staged files into place, then publish the manifest. Idempotent: a file
    already moved is skipped, so a commit cut short can simply be run again."""
    data = os.path.join(staging, "data")
    dirs = set()
    for i, final in enumerate(manifest["files"]):
        if i == len(manifest["files"]) // 2:
            _crash_point("mid-commit")
        source = os.path.join(data, manifest["staged_files"][i])
        target = os.path.join(output, final)
        if os.path.exists(source):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.replace(source, target)
            dirs.add(os.path.dirname(target))
        elif not os.path.exists(target):
            raise RuntimeError(f"run {manifest['run']}: staged file {source} is missing")
    for d in dirs:
        _fsync_dir(d)
    os.makedirs(os.path.join(output, OFFSETS_DIR), exist_ok=True)
    _write_json_atomic(os.path.join(output, OFFSETS_DIR, f"{manifest['run']:06d}.json"), manifest)
    shutil.rmtree(staging, ignore_errors=True)
    progress(f"run {manifest['run']}: committed {len(manifest['files'])} files")


def recover(output: str, progress: Progress = print) -> list[int]:
    """Finish or discard what a crashed run left; returns the runs rolled forward."""
    rolled = []
    staging_root = os.path.join(output, STAGING_DIR)
    committed = set(committed_runs(output))
    if os.path.isdir(staging_root):
        for name in sorted(os.listdir(staging_root)):
            staging = os.path.join(staging_root, name)
            prepared = os.path.join(staging, PREPARED)
            if name.isdigit() and int(name) not in committed and os.path.exists(prepared):
                with open(prepared, encoding="utf-8") as f:
                    manifest = json.load(f)
                progress(f"run {manifest['run']}: finishing its interrupted commit")
                _commit(output, manifest, staging, progress)
                rolled.append(manifest["run"])
            else:
                if not (name.isdigit() and int(name) in committed):
                    progress(
                        f"run {int(name) if name.isdigit() else name}: discarding its unfinished output"
                    )
                shutil.rmtree(staging, ignore_errors=True)
    _remove_uncommitted_files(output, set(committed_runs(output)), progress)
    return rolled


def _remove_uncommitted_files(output: str, committed: set[int], progress: Progress) -> None:
    """Data files whose run has no manifest (none should exist: files are only moved
    after their manifest is prepared, and prepared runs are rolled forward)."""
    for root, dirs, files in os.walk(output):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in files:
            if not name.startswith(RUN_PREFIX):
                continue
            digits = name[len(RUN_PREFIX) : len(RUN_PREFIX) + 6]
            if digits.isdigit() and int(digits) not in committed:
                progress(f"removing {name}: its run was never committed")
                os.unlink(os.path.join(root, name))


# ------------------------------------------------------------------------- run


class _StageProgress:
    """Prints task progress of the running Spark job once a second (from Spark's status
    tracker), on a daemon thread."""

    def __init__(self, spark: Any, progress: Progress, total_records: int):
        self.tracker = spark.sparkContext.statusTracker()
        self.progress = progress
        self.total_records = total_records
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest-progress", daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        from py4j.protocol import Py4JError

        last = ""
        while not self._stop.wait(1.0):
            try:
                done = total = 0
                for stage_id in self.tracker.getActiveStageIds():
                    info = self.tracker.getStageInfo(stage_id)
                    if info is not None:
                        done += info.numCompletedTasks
                        total += info.numTasks
            except (Py4JError, OSError):  # the JVM is going away; progress is best effort
                return
            if total:
                line = f"loading: {done}/{total} tasks done, {time.monotonic() - self.started:.0f}s"
                if line != last:
                    self.progress(line)
                    last = line


def plan_run(config: IngestConfig, start_from: dict[TopicPartition, int]) -> tuple[dict, dict]:
    """(start, end) offsets per partition for the next run: from the last committed end
    (or ``starting_offsets`` for partitions not seen yet) to the latest offset, capped by
    ``max_records_per_run``."""
    from .client import OffsetClient

    with OffsetClient(
        config.bootstrap_servers,
        client_id="pykfk-spark-ingest",
        read_committed=config.isolation_level == "read_committed",
    ) as client:
        if config.pattern:
            tps = client.partitions(pattern=config.pattern)
        else:
            tps = client.partitions(topics=config.topics)
        earliest = client.earliest(tps)
        latest = client.latest(tps)
    start, end = {}, {}
    for tp in tps:
        if tp in start_from:
            begin = start_from[tp]
        else:
            begin = latest[tp] if config.starting_offsets == "latest" else earliest[tp]
        stop = latest[tp]
        if config.max_records_per_run:
            stop = min(stop, begin + config.max_records_per_run)
        start[tp], end[tp] = begin, max(begin, stop)
    return start, end


def run_ingest(spark: Any, config: IngestConfig, progress: Progress = print) -> IngestSummary:
    """One ingest run on ``spark`` (a SparkSession): recover, plan, load, commit."""
    from pyspark.sql import functions as F

    from . import register

    began = time.monotonic()
    output = os.path.abspath(config.output)
    with _locked(output):
        recovered = recover(output, progress)
        _publish_pending_audits(output, config, progress)
        start, end = plan_run(config, committed_offsets(output))
        todo = {tp: end[tp] - start[tp] for tp in start}
        if not any(todo.values()):
            return IngestSummary(None, {}, [], 0, time.monotonic() - began, recovered)
        runs = committed_runs(output)
        run = (runs[-1] if runs else 0) + 1
        staging = os.path.join(output, STAGING_DIR, f"{run:06d}")
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        progress(
            f"run {run}: loading {sum(todo.values())} offsets from {sum(1 for n in todo.values() if n)} partitions"
        )

        register(spark)
        # Only the partitions with offsets to load: one whose committed end lies past
        # today's last stable offset (a read_uncommitted run before, a transaction open
        # now) waits, instead of failing the read as "beyond the log end".
        busy = sorted(tp for tp in start if end[tp] > start[tp])
        assigned: dict[str, list[int]] = {}
        for topic, partition in busy:
            assigned.setdefault(topic, []).append(partition)
        reader = (
            spark.read.format("pykfk")
            .option("kafka.bootstrap.servers", config.bootstrap_servers)
            .option("assign", json.dumps(assigned))
            .option("startingOffsets", json.dumps(offsets_json({tp: start[tp] for tp in busy})))
            .option("endingOffsets", json.dumps(offsets_json({tp: end[tp] for tp in busy})))
            .option("failOnDataLoss", str(config.fail_on_data_loss).lower())
            .option("kafka.isolation.level", config.isolation_level)
        )
        if config.max_records_per_partition:
            reader = reader.option("maxRecordsPerPartition", str(config.max_records_per_partition))
        # Event date and hour in UTC from the record timestamp, independent of the session
        # time zone: whole days and hours since the epoch.
        micros = F.unix_micros("timestamp")
        df = (
            reader.load()
            .withColumn(
                "date",
                F.date_from_unix_date(F.floor(micros / 86_400_000_000).cast("int")).cast("string"),
            )
            .withColumn(
                "hour", F.lpad(F.pmod(F.floor(micros / 3_600_000_000), 24).cast("string"), 2, "0")
            )
        )
        data = os.path.join(staging, "data")
        with _StageProgress(spark, progress, sum(todo.values())):
            (
                df.write.mode("overwrite")
                .option("compression", config.compression)
                .partitionBy("date", "hour")
                .parquet(data)
            )
        _crash_point("after-load")
        stats = (
            spark.read.parquet(data)
            .groupBy("topic", "partition")
            .agg(
                F.count("*").alias("records"),
                F.sum(
                    F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
                ).alias("bytes"),
                F.min("offset").alias("first"),
                F.max("offset").alias("last"),
            )
            .collect()
            if _has_parquet(data)
            else []
        )
        partitions = {
            tp: PartitionSummary(start[tp], end[tp]) for tp in start if end[tp] > start[tp]
        }
        for row in stats:
            tp = (row["topic"], row["partition"])
            p = partitions[tp]
            if row["first"] < p.start or row["last"] >= p.end:
                raise RuntimeError(
                    f"{tp}: offsets {row['first']}..{row['last']} outside {p.start}..{p.end - 1}"
                )
            p.records, p.bytes = row["records"], row["bytes"] or 0
        audit_counts = _audit_counts(spark, data, config) if config.audit_bootstrap_servers else []
        staged = _staged_files(data)
        files = [
            os.path.join(os.path.dirname(s), f"{RUN_PREFIX}{run:06d}-{os.path.basename(s)}")
            for s in staged
        ]
        file_bytes = sum(os.path.getsize(os.path.join(data, s)) for s in staged)
        manifest = {
            "format": MANIFEST_FORMAT,
            "run": run,
            "topics": sorted({t for t, _ in start}),
            "start": offsets_json(start),
            "end": offsets_json(end),
            "partitions": {
                t: {str(p): vars(s) for (tt, p), s in sorted(partitions.items()) if tt == t}
                for t in sorted({t for t, _ in partitions})
            },
            "records": sum(p.records for p in partitions.values()),
            "bytes": sum(p.bytes for p in partitions.values()),
            "files": files,
            "staged_files": staged,
            "file_bytes": file_bytes,
            "committed_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "isolation_level": config.isolation_level,
            "audit_emitter": audit_emitter_id(output, config.audit_tier, run, start, end),
            "audit": audit_counts,
        }
        _write_json_atomic(os.path.join(staging, PREPARED), manifest)
        _crash_point("after-prepare")
        _commit(output, manifest, staging, progress)
        _crash_point("after-commit")
        _publish_pending_audits(output, config, progress)
        return IngestSummary(
            run, partitions, files, file_bytes, time.monotonic() - began, recovered
        )


def _audit_counts(spark: Any, data: str, config: IngestConfig) -> list[list[Any]]:
    """[topic, window start ms, records] of the staged run, by record timestamp."""
    if not _has_parquet(data):
        return []
    from pyspark.sql import functions as F

    size = config.audit_window_ms
    millis = F.unix_millis("timestamp")
    rows = (
        spark.read.parquet(data)
        .groupBy("topic", (millis - F.pmod(millis, F.lit(size))).alias("window"))
        .count()
        .collect()
    )
    return sorted([row["topic"], int(row["window"]), int(row["count"])] for row in rows)


def _audited_marker(output: str, run: int) -> str:
    return os.path.join(output, OFFSETS_DIR, f"{run:06d}{AUDITED_SUFFIX}")


def audit_emitter_id(
    output: str, tier: str, run: int, start: dict[TopicPartition, int], end: dict[TopicPartition, int]
) -> str:
    """The emitter id of a run's counts, kept in its manifest: the same whenever they are
    published again, different for another run or other offset ranges (a new output
    in the same place)."""
    ranges = json.dumps([offsets_json(start), offsets_json(end)], sort_keys=True)
    digest = hashlib.sha256(ranges.encode()).hexdigest()[:16]
    return f"{tier}:{output}:run{run}:{digest}"


def _publish_pending_audits(output: str, config: IngestConfig, progress: Progress) -> None:
    """Publish the counts of every committed run not yet marked as audited."""
    if not config.audit_bootstrap_servers:
        return
    for run in committed_runs(output):
        if os.path.exists(_audited_marker(output, run)):
            continue
        if not _emit_audit(output, run, config, progress):
            return  # the audit cluster is not answering: the next run tries again


def _emit_audit(output: str, run: int, config: IngestConfig, progress: Progress) -> bool:
    """Publish a committed run's counts, then mark it audited; False when they could not
    be published. Publishing them again (a crash before the mark) counts once: the
    audit record keys are the same."""
    manifest = read_manifest(output, run)
    counts = manifest.get("audit") or []
    if counts:
        from pykfk.audit import AuditEmitter

        emitter = AuditEmitter(
            config.audit_bootstrap_servers or "", config.audit_tier, topic=config.audit_topic,
            window_ms=config.audit_window_ms,
            # manifests of earlier versions lack the id; they published under this one
            emitter_id=manifest.get("audit_emitter", f"{config.audit_tier}:{output}:run{run}"),
            background=False,
        )
        emitter.add_counts({(config.audit_names.get(t, t), w): n for t, w, n in counts})
        try:
            emitter.close()
        except Exception as exc:  # noqa: BLE001 - published by a later run
            progress(f"run {run}: audit counts not published ({exc}); the next run publishes them")
            return False
        _crash_point("after-audit")
        progress(f"run {run}: audit counts published ({len(counts)} windows)")
    with open(_audited_marker(output, run), "w", encoding="utf-8") as f:
        json.dump({"tier": config.audit_tier, "topic": config.audit_topic, "windows": len(counts)}, f)
    return True


def _has_parquet(directory: str) -> bool:
    return bool(_staged_files(directory))


def _staged_files(directory: str) -> list[str]:
    """Parquet files under ``directory``, relative to it, sorted."""
    out = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        out += [
            os.path.relpath(os.path.join(root, f), directory)
            for f in files
            if f.endswith(".parquet")
        ]
    return sorted(out)


# ------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pykfk-spark-ingest",
        description="Load Kafka topics into Parquet (date=/hour= partitions) exactly once.",
    )
    p.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port]")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", help="a topic to load (repeatable)")
    which.add_argument("--pattern", help="load every topic whose whole name matches this regex")
    p.add_argument("--output", required=True, help="output directory (local path)")
    p.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default="earliest",
        help="where partitions no earlier run covered start (default earliest)",
    )
    p.add_argument(
        "--max-records-per-partition", type=int, help="split ranges into Spark tasks of this size"
    )
    p.add_argument(
        "--max-records-per-run", type=int, help="load at most this many offsets per partition"
    )
    p.add_argument(
        "--no-fail-on-data-loss",
        action="store_true",
        help="skip offsets deleted by retention instead of failing",
    )
    p.add_argument("--compression", default="snappy", help="Parquet codec (default snappy)")
    p.add_argument(
        "--isolation-level",
        choices=("read_committed", "read_uncommitted"),
        default="read_committed",
        help="read_committed (default): only records of committed transactions and "
        "non-transactional ones, up to the last stable offset; read_uncommitted: aborted "
        "and open transactions' records too, up to the high watermark",
    )
    p.add_argument("--audit-bootstrap-servers", help="publish audit counts to this cluster")
    p.add_argument("--audit-topic", default="__pykfk_audit", help="audit topic (default __pykfk_audit)")
    p.add_argument("--audit-tier", default="spark-ingest", help="tier name in the audit (default spark-ingest)")
    p.add_argument("--audit-window-ms", type=int, default=60_000, help="audit window (default 60000)")
    p.add_argument(
        "--audit-as", action="append", default=[], metavar="TOPIC=NAME",
        help="count TOPIC under NAME in the audit (repeatable; e.g. east.orders=orders)",
    )
    p.add_argument(
        "--master", default=None, help="Spark master (default: spark-submit's, else local[*])"
    )
    p.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark setting"
    )
    return p


def _progress(line: str) -> None:
    print(f"[{datetime.now().strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    config = IngestConfig(
        bootstrap_servers=args.bootstrap_servers,
        output=args.output,
        topics=args.topic or [],
        pattern=args.pattern,
        starting_offsets=args.starting_offsets,
        max_records_per_partition=args.max_records_per_partition,
        max_records_per_run=args.max_records_per_run,
        fail_on_data_loss=not args.no_fail_on_data_loss,
        compression=args.compression,
        isolation_level=args.isolation_level,
        audit_bootstrap_servers=args.audit_bootstrap_servers,
        audit_topic=args.audit_topic,
        audit_tier=args.audit_tier,
        audit_window_ms=args.audit_window_ms,
        audit_names=dict(item.split("=", 1) for item in args.audit_as if "=" in item),
    )
    # Workers must run this interpreter (the one pykfk is installed in), not python3 on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("pykfk-spark-ingest").config(
        "spark.ui.showConsoleProgress", "false"
    )
    if args.master:
        builder = builder.master(args.master)
    elif "spark.master" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        builder = builder.master("local[*]")
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--conf needs KEY=VALUE, not {item!r}")
        builder = builder.config(key, value)
    _progress("starting Spark")
    spark = builder.getOrCreate()
    try:
        summary = run_ingest(spark, config, _progress)
    finally:
        spark.stop()
    print(summary.format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
