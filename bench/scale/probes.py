"""What the scale bench reads from the broker process and how it times requests."""

from __future__ import annotations

import os
import statistics
import threading
import time
import urllib.request

from pykfk.testing import RawClient

API_VERSIONS, METADATA, CREATE_TOPICS = 18, 3, 19
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    return sum(user_and_kernel_cpu_seconds(pid))


def user_and_kernel_cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds the process has spent in its own code and in the kernel (utime, stime)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class OtherClient:
    """Another client of the broker: an ApiVersions round trip every ``interval_s`` on
    its own connection; records each round trip's time."""

    def __init__(self, host: str, port: int, interval_s: float = 0.005):
        self.raw = RawClient(host, port, timeout=30)
        self.interval_s = interval_s
        self.times_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> OtherClient:  # noqa: PYI034 - Python 3.10 has no typing.Self
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.raw.close()

    def _run(self) -> None:
        body = {"client_software_name": "scale-bench", "client_software_version": "1"}
        while not self._stop.is_set():
            start = time.perf_counter()
            self.raw.call(API_VERSIONS, 3, body)
            self.times_ms.append((time.perf_counter() - start) * 1000)
            self._stop.wait(self.interval_s)


def create_topic(raw: RawClient, name: str, partitions: int) -> tuple[float, int]:
    """(seconds until CreateTopics answered, its error code)."""
    body = {
        "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                    "assignments": [], "configs": []}],
        "timeout_ms": 120_000,
        "validate_only": False,
    }
    start = time.perf_counter()
    response = raw.call(CREATE_TOPICS, 4, body)
    return time.perf_counter() - start, response.topics[0].error_code


def metadata_round_trip_ms(raw: RawClient, topic: str, repeats: int = 7) -> tuple[float, int]:
    """Median time of a Metadata request (v5) for one topic to the last byte of its
    response (not decoded: the client's decoding is not the broker's cost), and the
    response size."""
    body = {"topics": [{"name": topic}], "allow_auto_topic_creation": False}
    times, size = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        raw.send(METADATA, 5, body)
        size = len(raw.recv_frame())
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), size


def idle_cpu_percent(pid: int, seconds: float) -> float:
    before = cpu_seconds(pid)
    time.sleep(seconds)
    return (cpu_seconds(pid) - before) / seconds * 100


def request_counts(metrics_url: str) -> dict[str, int]:
    """Requests the broker has received by API name (all versions), read from its metrics
    endpoint (``kafka_network_requestmetrics_requests_total``)."""
    prefix = "kafka_network_requestmetrics_requests_total{"
    with urllib.request.urlopen(metrics_url, timeout=60) as response:
        text = response.read().decode()
    counts: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            labels, _, value = line[len(prefix):].partition("} ")
            name = labels.split('request="', 1)[1].split('"', 1)[0]
            counts[name] = counts.get(name, 0) + int(float(value))
    return counts


def count_difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: count - before.get(name, 0) for name, count in sorted(after.items())
            if count - before.get(name, 0)}
