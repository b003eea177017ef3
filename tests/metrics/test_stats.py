"""The counters behind the metrics, the metrics.listener setting, and the endpoint's
HTTP handling, without a broker."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry, Counter

from pykfk.metrics.address import parse_listener
from pykfk.metrics.endpoint import MetricsEndpoint
from pykfk.metrics.stats import (
    LATENCY_BOUNDS_S,
    TIME_PARTS,
    VERSION_SLOTS,
    BrokerTopicStats,
    FlushStats,
    Histogram,
    RequestStats,
)


def test_histogram_buckets_are_upper_bounds() -> None:
    histogram = Histogram((1.0, 2.0))
    for value in (0.5, 1.0, 1.5, 2.0, 3.0):
        histogram.observe(value)
    assert histogram.counts == [2, 2, 1]  # (.., 1], (1, 2], (2, ..)
    assert histogram.cumulative() == [2, 4, 5]
    assert histogram.count == 5
    assert histogram.sum == pytest.approx(8.0)


class _Ctx:
    def __init__(self, api_key: int, own_time: float = 0.0):
        self.api_key = api_key
        self.own_time = own_time


class _Request:
    def __init__(self, ctx: _Ctx | None, received: float, started: float, handled: float,
                 ready: float | None = None):
        self.ctx = ctx
        self.received, self.started, self.handled = received, started, handled
        self.ready = handled if ready is None else ready


def test_request_stats_counts() -> None:
    stats = RequestStats()
    stats.counts[0 * VERSION_SLOTS + 7] += 3
    stats.counts[1 * VERSION_SLOTS + 11] += 1
    assert stats.requests() == [(0, 7, 3), (1, 11, 1)]
    stats.throttle("producer_byte_rate", 0.25)
    stats.throttle("producer_byte_rate", 0.5)
    assert stats.throttle_time_s == {"producer_byte_rate": 0.75}
    assert stats.throttled == {"producer_byte_rate": 2}


def test_request_time_parts() -> None:
    stats = RequestStats()
    # Two Produce requests of one read answered at once, sent together 30 us after the
    # second handler returned; a Fetch that worked 1 ms in its task and waited 0.4 s.
    produce_a = _Request(_Ctx(0), received=10.0, started=10.0, handled=10.00002)
    produce_b = _Request(_Ctx(0), received=10.0, started=10.00002, handled=10.00004)
    stats.observe_sent([produce_a, produce_b, _Request(None, 0, 0, 0)], 10.00004, 10.00007)
    fetch = _Request(_Ctx(1, own_time=0.001), received=20.0, started=20.0, handled=20.00001,
                     ready=20.40101)
    stats.observe_sent([fetch], 20.502, 20.503)
    times = stats.times()
    assert sorted(times) == [0, 1]
    parts = dict(zip(TIME_PARTS, times[0], strict=True))
    assert all(h.count == 2 for h in parts.values())
    # The first request queued behind nothing, the second 20 us behind the first.
    assert parts["requestqueuetimems"].counts[0] == 2  # (both under the first bound, 50 us)
    assert parts["requestqueuetimems"].sum == pytest.approx(0.00002)
    assert parts["remotetimems"].sum == 0
    assert parts["responsequeuetimems"].sum == pytest.approx(0.00002)  # the first waited for the second
    assert parts["responsesendtimems"].sum == pytest.approx(0.00006)
    assert parts["totaltimems"].sum == pytest.approx(0.00014)
    assert parts["localtimems"].sum == pytest.approx(0.00004)
    fetch_parts = dict(zip(TIME_PARTS, times[1], strict=True))
    assert fetch_parts["localtimems"].sum == pytest.approx(0.00101)
    assert fetch_parts["remotetimems"].sum == pytest.approx(0.4)
    assert fetch_parts["remotetimems"].counts[LATENCY_BOUNDS_S.index(0.5)] == 1  # (0.25, 0.5]
    assert fetch_parts["responsequeuetimems"].sum == pytest.approx(0.10099)
    assert fetch_parts["totaltimems"].sum == pytest.approx(0.503)
    # Every part of a request adds up to its total.
    for histograms in times.values():
        assert sum(h.sum for h in histograms[:5]) == pytest.approx(histograms[5].sum)


def test_request_times_of_many_requests() -> None:
    stats = RequestStats(timing=True)
    requests = [_Request(_Ctx(i % 3), received=1.0, started=1.0, handled=1.0 + 0.001 * i) for i in range(500)]
    for start in range(0, 500, 50):
        stats.observe_sent(requests[start:start + 50], 2.0, 2.0)
    times = stats.times()
    local = {api_key: histograms[TIME_PARTS.index("localtimems")] for api_key, histograms in times.items()}
    assert {k: h.count for k, h in local.items()} == {0: 167, 1: 167, 2: 166}
    assert local[1].sum == pytest.approx(sum(0.001 * i for i in range(1, 500, 3)))
    expected = Histogram(LATENCY_BOUNDS_S)
    for i in range(0, 500, 3):
        expected.observe(0.001 * i)
    assert local[0].counts == expected.counts
    total = {api_key: histograms[TIME_PARTS.index("totaltimems")] for api_key, histograms in times.items()}
    assert total[2].counts[LATENCY_BOUNDS_S.index(1.0)] == 166  # 1 s each: (0.5, 1]


def test_topic_stats_are_shared_per_topic() -> None:
    stats = BrokerTopicStats()
    first = stats.for_topic("a")
    first.messages_in += 5
    assert stats.for_topic("a") is first
    assert [name for name, _ in stats.items()] == ["a"]
    stats.remove("a")
    assert stats.for_topic("a") is not first


def test_flush_stats_from_threads() -> None:
    import threading

    stats = FlushStats()
    threads = [threading.Thread(target=lambda: [stats.observe(0.001) for _ in range(1000)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    cumulative, total = stats.snapshot()
    assert cumulative[-1] == 4000
    assert total == pytest.approx(4.0)


@pytest.mark.parametrize(("value", "expected"), [
    ("http://127.0.0.1:9404", ("127.0.0.1", 9404)),
    ("http://localhost:0/", ("localhost", 0)),
    ("http://[::1]:9404", ("::1", 9404)),
])
def test_parse_listener(value: str, expected: tuple[str, int]) -> None:
    assert parse_listener(value) == expected


@pytest.mark.parametrize("value", ["127.0.0.1:9404", "https://h:1", "http://h", "http://:1", "http://h:1/metrics",
                                   "http://h:99999", "http://u:p@h:1"])
def test_parse_listener_refuses(value: str) -> None:
    with pytest.raises(ValueError):
        parse_listener(value)


async def _http(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    except ConnectionResetError:
        return b""  # closed with our bytes unread
    finally:
        writer.close()


async def test_endpoint_http() -> None:
    registry = CollectorRegistry(auto_describe=False)
    counter = Counter("things", "things counted", registry=registry)
    counter.inc(3)
    scrapes = []

    async def before() -> None:
        scrapes.append(1)

    endpoint = MetricsEndpoint(registry, "127.0.0.1", 0, before_scrape=before)
    _host, port = await endpoint.start()
    try:
        ok = await _http(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
        assert b"Content-Type: text/plain; version=0.0.4" in ok
        assert b"things_total 3.0" in ok
        open_metrics = await _http(port, b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; "
                                         b"version=1.0.0\r\n\r\n")
        assert b"application/openmetrics-text" in open_metrics and open_metrics.endswith(b"# EOF\n")
        assert scrapes == [1, 1]
        assert (await _http(port, b"GET /other HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 404 ")
        assert (await _http(port, b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405 ")
        assert (await _http(port, b"nonsense\r\n\r\n")).startswith(b"HTTP/1.1 400 ")
        head = await _http(port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
        # Too long a request head: closed without an answer.
        assert await _http(port, b"GET /metrics HTTP/1.1\r\nX: " + b"x" * 100_000 + b"\r\n\r\n") == b""
        assert scrapes == [1, 1, 1]
    finally:
        await endpoint.stop()
