"""Helpers of the metrics tests: scrape and parse an endpoint, run a real Prometheus."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from pykfk.testing import free_port, wait_until

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        return str(response.read().decode("utf-8"))


def parse(text: str) -> Samples:
    """Every sample of a text exposition: (name, sorted labels) -> value."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels``; KeyError when absent."""
    return samples[(name, tuple(sorted(labels.items())))]


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= set(ls))


_METRICS_AT = re.compile(r"metrics at (http://\S+/metrics)")


def broker_metrics_url(broker: Any) -> str:
    """The endpoint of a broker process's current run, from its log (with port 0 each
    start binds a new port)."""
    def found() -> str | None:
        urls = _METRICS_AT.findall(broker.log_text())
        return urls[-1] if urls else None
    return str(wait_until(found, 30, "the broker's metrics endpoint", 0.05))


def scrape_broker(broker: Any) -> Samples:
    return parse(scrape(broker_metrics_url(broker)))


class PrometheusServer:
    """Debian's ``prometheus`` binary on 127.0.0.1 with a temporary config and storage,
    scraping ``targets`` every ``scrape_interval_s``."""

    def __init__(self, directory: str, targets: list[str], scrape_interval_s: float = 1.0):
        self.directory = directory
        self.targets = targets
        self.scrape_interval_s = scrape_interval_s
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = os.path.join(directory, "prometheus.log")

    @staticmethod
    def binary() -> str | None:
        return shutil.which("prometheus")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        binary = self.binary()
        assert binary is not None, "the prometheus binary is not installed (apt-get install prometheus)"
        interval = f"{int(self.scrape_interval_s * 1000)}ms"
        config = os.path.join(self.directory, "prometheus.yml")
        # YAML is a superset of JSON: the config needs no YAML library.
        with open(config, "w", encoding="utf-8") as f:
            json.dump({
                "global": {"scrape_interval": interval, "evaluation_interval": interval},
                "scrape_configs": [{"job_name": "pykfk", "scrape_interval": interval,
                                    "scrape_timeout": interval,
                                    "static_configs": [{"targets": self.targets}]}],
            }, f)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([
                binary, f"--config.file={config}",
                f"--storage.tsdb.path={os.path.join(self.directory, 'data')}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ], stdout=log, stderr=subprocess.STDOUT)
        wait_until(self._ready, timeout, "prometheus to be ready")
        return self

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (at ``at``, epoch seconds, or now)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            answer = json.load(response)
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(FileNotFoundError), open(self.log_path, encoding="utf-8", errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])
        return ""
