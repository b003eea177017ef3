"""A real Prometheus (Debian's ``prometheus`` package) scrapes a broker under a steady
produce load, and PromQL's ``rate()`` of the broker's messages-in counter matches the
rate the producer measured from its delivery reports, within 10%."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from pykfk.testing import free_port, wait_until

from .promtools import PrometheusServer

TOPIC = "load"
RATE = 2000  # messages per second, well within what one broker on a shared machine takes
WINDOW_S = 10  # the rate() window, and the client's measuring window
LOAD_S = WINDOW_S + 4  # the window ends at the end of the load, after a few steady seconds
VALUE = b"m" * 100

pytestmark = pytest.mark.skipif(PrometheusServer.binary() is None,
                                reason="needs the prometheus binary (Debian package prometheus; .ci/install)")


def _steady_load(bootstrap: str, rate: int, seconds: float) -> tuple[list[float], float]:
    """Produce ``rate`` messages a second for ``seconds``; returns the delivery times of
    the acknowledged messages (epoch seconds) and the end of the load."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5})
    delivered: list[float] = []
    lock = threading.Lock()

    def on_delivery(err: Any, _msg: Any) -> None:
        assert err is None, err
        with lock:
            delivered.append(time.time())

    # The topic exists and the connection is up before the measured load starts.
    producer.produce(TOPIC, VALUE, on_delivery=lambda err, _msg: None)
    assert producer.flush(30) == 0
    start = time.monotonic()
    sent = 0
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while sent < due:
            producer.produce(TOPIC, VALUE, on_delivery=on_delivery)
            sent += 1
        producer.poll(0)
        time.sleep(0.002)  # the pace of the load, not a wait for something
    end = time.time()
    assert producer.flush(30) == 0
    return delivered, end


def test_prometheus_rate_matches_produced_rate(pykfk_broker_factory: Any, tmp_path: Any) -> None:
    metrics_port = free_port()
    broker = pykfk_broker_factory(metrics_listener=f"http://127.0.0.1:{metrics_port}",
                                  num_partitions=2)
    prometheus = PrometheusServer(str(tmp_path), [f"127.0.0.1:{metrics_port}"], scrape_interval_s=1.0)
    prometheus.start()
    try:
        wait_until(lambda: prometheus.query('up{job="pykfk"} == 1'), 30, "the first scrape of the broker", 0.2)
        delivered, end = _steady_load(broker.bootstrap, RATE, LOAD_S)
        measured = sum(1 for t in delivered if end - WINDOW_S < t <= end) / WINDOW_S
        assert measured == pytest.approx(RATE, rel=0.1), "the producer did not keep its pace"
        series = f'kafka_server_brokertopicmetrics_messagesin_total{{topic="{TOPIC}"}}'
        # Evaluated at the end of the load once a later scrape is stored.
        wait_until(lambda: prometheus.query(f"timestamp({series}) > {end:.3f}"), 30, "a scrape after the load", 0.2)
        result = prometheus.query(f"sum(rate({series}[{WINDOW_S}s]))", at=end)
        assert result, f"no data for {series}:\n{prometheus.log_tail()}"
        scraped = float(result[0]["value"][1])
        print(f"produced {measured:.1f} messages/s, Prometheus rate() {scraped:.1f}/s")
        assert scraped == pytest.approx(measured, rel=0.1), (scraped, measured)
        # Requests per API and version come through too.
        produce = prometheus.query('sum(kafka_network_requestmetrics_requests_total{request="Produce"})')
        assert produce and float(produce[0]["value"][1]) > 0
    finally:
        prometheus.stop()
