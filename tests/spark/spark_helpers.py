"""Topic creation and fast producing for the Spark tests: batches built by the compiled
core and sent as raw Produce requests, several in flight, so a million records take
about a second instead of a minute through a per-record client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence

import pytest

from pykfk._core.records import build_batch
from pykfk.client.connection import BrokerConnection

PRODUCE = 0
CREATE_TOPICS = 19

Record = tuple  # (key, value, timestamp_ms, headers)

FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def connect(bootstrap: str) -> BrokerConnection:
    host, _, port = bootstrap.rpartition(":")
    return BrokerConnection(host, int(port)).connect()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    with connect(bootstrap) as conn:
        body = {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout_ms": 10000,
        }
        result = conn.request(CREATE_TOPICS, body).topics[0]
        assert result.error_code == 0, result


def produce(
    bootstrap: str,
    topic: str,
    records_for: Callable[[int, int, int], Sequence[Record]],
    partitions: Iterable[int],
    count: int,
    *,
    first_offset: int = 0,
    batch_records: int = 5000,
    in_flight: int = 4,
) -> None:
    """Append ``count`` records to each of ``partitions``; ``records_for(partition,
    first, n)`` returns the records for offsets first..first+n-1 of that partition
    (offsets are assigned by the broker, so ``first_offset`` must be the log end)."""
    parts = list(partitions)
    with connect(bootstrap) as conn:
        pending = []
        for start in range(first_offset, first_offset + count, batch_records):
            n = min(batch_records, first_offset + count - start)
            data = [
                {"index": p, "records": build_batch(records_for(p, start, n), base_offset=start)}
                for p in parts
            ]
            body = {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 30000,
                "topic_data": [{"name": topic, "partition_data": data}],
            }
            pending.append((conn.send(PRODUCE, body, version=7), start))
            while len(pending) >= in_flight:
                entry, base = pending.pop(0)
                _check(conn.receive(entry), base)
        for entry, base in pending:
            _check(conn.receive(entry), base)


def _check(response: object, base_offset: int) -> None:
    for topic in response.responses:  # type: ignore[attr-defined]
        for part in topic.partition_responses:
            assert part.error_code == 0, (topic.name, part)
            assert part.base_offset == base_offset, (
                topic.name,
                part,
                "log end was not first_offset",
            )


# ------------------------------------------------------------- pykfk-spark-ingest runs


def ingest_command(bootstrap: str, output: str, topics: Sequence[str], extra: Sequence[str] = ()) -> list[str]:
    # A killed JVM cannot clean up: keep its scratch and temp dirs under the test's tmp_path.
    local = os.path.join(os.path.dirname(output), "spark-local")
    os.makedirs(local, exist_ok=True)
    command = [sys.executable, "-m", "pykfk_spark.ingest", "--bootstrap-servers", bootstrap]
    for topic in topics:
        command += ["--topic", topic]
    return command + [
        "--output",
        output,
        *extra,
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        f"spark.local.dir={local}",
        "--conf",
        f"spark.driver.extraJavaOptions={FAST_JVM} -Djava.io.tmpdir={local}",
    ]


def start_ingest(
    bootstrap: str, output: str, topics: Sequence[str], extra: Sequence[str] = (), **env: str
) -> subprocess.Popen:
    """``pykfk-spark-ingest`` as a process of its own session, so killpg takes the
    driver, the JVM and the Python workers at once."""
    return subprocess.Popen(
        ingest_command(bootstrap, output, topics, extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **env},
    )


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)


def wait_for_line(proc: subprocess.Popen, needle: str, timeout: float) -> list[str]:
    """Lines of the job's output up to one containing ``needle``."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return lines
    kill_group(proc)
    pytest.fail(f"job never printed {needle!r}:\n{''.join(lines[-30:])}")
