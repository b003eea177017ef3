"""Client quotas: set and described through Alter/DescribeClientQuotas, a producer held
to 1 MB/s while another on the same broker is not, throttle times reported to clients."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from pykfk.errors import ErrorCode
from pykfk.security.quotas import QuotaManager
from pykfk.testing import BrokerProcess, RawClient

QUOTA = 1_000_000  # bytes per second
VALUE = b"q" * 10_000


def _alter(raw: RawClient, entity: list[tuple[str, str | None]], ops: list[tuple[str, float, bool]]) -> int:
    answer = raw.call(49, 1, {"entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                                           "ops": [{"key": k, "value": v, "remove": r} for k, v, r in ops]}],
                              "validate_only": False})
    return answer.entries[0].error_code


@pytest.fixture
def quota_broker(tmp_path):
    broker = BrokerProcess(str(tmp_path / "data"), {"num.partitions": 1}, log_level="WARNING").start()
    yield broker
    broker.stop()


def test_quotas_are_set_described_and_validated(quota_broker):
    raw = RawClient("127.0.0.1", quota_broker.port)
    try:
        assert _alter(raw, [("client-id", "c1")], [("producer_byte_rate", 2048.0, False)]) == ErrorCode.NONE
        assert _alter(raw, [("user", None)], [("consumer_byte_rate", 4096.0, False)]) == ErrorCode.NONE
        assert _alter(raw, [("client-id", "c1")], [("bogus_rate", 1.0, False)]) == ErrorCode.INVALID_REQUEST
        assert _alter(raw, [("ip", "1.2.3.4")], [("producer_byte_rate", 1.0, False)]) == ErrorCode.INVALID_REQUEST
        assert _alter(raw, [("client-id", "c2")], [("producer_byte_rate", -5.0, False)]) == ErrorCode.INVALID_REQUEST
        described = raw.call(48, 1, {"components": [], "strict": False})
        found = {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry["values"]}
                 for entry in described.entries}
        assert found == {(("client-id", "c1"),): {"producer_byte_rate": 2048.0},
                         (("user", None),): {"consumer_byte_rate": 4096.0}}
        only_defaults = raw.call(48, 1, {"components": [{"entity_type": "user", "match_type": 1, "match": None}],
                                         "strict": True})
        assert len(only_defaults.entries) == 1
        assert _alter(raw, [("client-id", "c1")], [("producer_byte_rate", 0.0, True)]) == ErrorCode.NONE
        again = raw.call(48, 1, {"components": [{"entity_type": "client-id", "match_type": 0, "match": "c1"}],
                                 "strict": False})
        assert list(again.entries) == []
    finally:
        raw.close()


def _run_producer(bootstrap: str, client_id: str, seconds: float, out: dict[str, object]) -> None:
    delivered: list[float] = []
    throttles: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                         "queue.buffering.max.messages": 500,  # a short backlog: the flush below stays short
                         "throttle_cb": lambda event: throttles.append(event.throttle_time)})
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            producer.produce("quota", VALUE, on_delivery=lambda err, _m: delivered.append(time.monotonic())
                             if err is None else None)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    out["delivered"], out["throttles"] = delivered, throttles


@pytest.mark.slow
def test_a_producer_is_held_to_its_quota_and_another_is_not(quota_broker):
    raw = RawClient("127.0.0.1", quota_broker.port)
    try:
        assert _alter(raw, [("client-id", "limited")], [("producer_byte_rate", float(QUOTA), False)]) == 0
    finally:
        raw.close()
    warmup, window = 3.0, 20.0
    limited: dict[str, object] = {}
    free: dict[str, object] = {}
    start = time.monotonic()
    threads = [threading.Thread(target=_run_producer, args=(quota_broker.bootstrap, "limited", warmup + window,
                                                            limited)),
               threading.Thread(target=_run_producer, args=(quota_broker.bootstrap, "free", warmup + window, free))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)

    def rate(result: dict[str, object]) -> float:
        times = [t for t in result["delivered"] if start + warmup <= t < start + warmup + window]  # type: ignore[attr-defined]
        return len(times) * len(VALUE) / window

    limited_rate, free_rate = rate(limited), rate(free)
    print(f"limited {limited_rate / 1e6:.3f} MB/s (quota {QUOTA / 1e6:.1f}), free {free_rate / 1e6:.1f} MB/s, "
          f"{len(limited['throttles'])} throttle reports")  # type: ignore[arg-type]
    assert abs(limited_rate - QUOTA) <= 0.1 * QUOTA, limited_rate
    assert free_rate > 5 * QUOTA, free_rate
    assert limited["throttles"] and not free["throttles"]


def test_quota_precedence_and_rates():
    configs = {(("user", "alice"),): {"producer_byte_rate": 100.0},
               (("user", None),): {"producer_byte_rate": 50.0},
               (("client-id", "app"), ("user", "alice")): {"producer_byte_rate": 10.0},
               (("client-id", None),): {"consumer_byte_rate": 7.0}}
    quotas = QuotaManager(lambda: configs, lambda: 1)
    assert quotas.quota("producer_byte_rate", "alice", "app") == (("producer_byte_rate", "alice", "app"), 10.0)
    assert quotas.quota("producer_byte_rate", "alice", "other") == (("producer_byte_rate", "alice", None), 100.0)
    assert quotas.quota("producer_byte_rate", "bob", "x") == (("producer_byte_rate", "bob", None), 50.0)
    assert quotas.quota("consumer_byte_rate", "bob", "x") == (("consumer_byte_rate", None, "x"), 7.0)
    # 100 bytes/s: 300 bytes at once need 3 s of window, so 2 s of throttle after the first second.
    assert quotas.record("producer_byte_rate", "alice", "z", 300, now=1000.0) == pytest.approx(2.0)
    assert quotas.record("producer_byte_rate", "carol", "z", 10, now=1000.0) == 0.0


def _requests_in(raw: RawClient, seconds: float) -> tuple[int, int]:
    """(answers, answers that carried a throttle time) within ``seconds``."""
    count, throttled, deadline = 0, 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        throttled += raw.call(3, 4, {"topics": None, "allow_auto_topic_creation": False}).throttle_time_ms > 0
        count += 1
    return count, throttled


def test_request_time_quota_throttles_a_busy_client(quota_broker):
    raw = RawClient("127.0.0.1", quota_broker.port)
    try:
        # A tenth of a percent of the loop's time: tens of Metadata requests a second.
        assert _alter(raw, [("client-id", None)], [("request_percentage", 0.1, False)]) == ErrorCode.NONE
        limited, throttled = _requests_in(raw, 2.0)
        assert _alter(raw, [("client-id", None)], [("request_percentage", 0.0, True)]) == ErrorCode.NONE
    finally:
        raw.close()
    other = RawClient("127.0.0.1", quota_broker.port)
    try:
        free, _ = _requests_in(other, 2.0)
    finally:
        other.close()
    print(f"Metadata requests in 2 s: {limited} under a 0.1% request quota, {free} without")
    assert limited * 10 < free, (limited, free)
    assert throttled > 0  # the answers said how long the client was muted
