"""A long-poll Fetch parks as a loop Future (``pykfk._core.fetch_path.Fetch``), not a task:
the append that wakes it answers it with no asyncio Task made for the request, and a
fetch parked when its connection closes gives back the segment regions it pinned and
leaves no registration in the waiters."""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import struct
import time
from typing import Any

from pykfk._core.records import build_batch

from .test_handlers import API_VERSIONS, FETCH, PRODUCE, create_topic, fetch_request


def _on_loop(broker: Any, fn: Any) -> Any:
    """``fn()`` on the broker's loop (a callback: no task of its own)."""
    done: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            done.set_result(fn())
        except Exception as exc:  # noqa: BLE001 - raised in the test's thread
            done.set_exception(exc)

    broker.loop.call_soon_threadsafe(run)
    return done.result(10)


def _parked_slots(broker: Any) -> list[Any]:
    """The request slots of every connection still waiting for their answer."""
    server = broker.broker.servers[0]
    return [slot for conn in list(server.connections) for slot in conn._slots
            if slot.ctx is not None and slot.ctx.api_key == FETCH]


def _waiting_keys(broker: Any, topic: str) -> set[tuple[str, int]]:
    waiting = broker.broker.replica_manager.high_watermark_waiters._waiting
    return {key for key, parked in waiting.items() if key[0] == topic and parked}


def _until(broker: Any, fn: Any, what: str, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = _on_loop(broker, fn)
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def _produce(raw: Any, topic: str, partition: int, value: bytes) -> None:
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": build_batch([(None, value, 1000, [])])}]}]}
    answer = raw.call(PRODUCE, 7, body)
    assert answer.responses[0].partition_responses[0].error_code == 0


def test_a_parked_fetch_woken_by_an_append_is_answered_without_a_task(broker, raw):
    topic = "parked-future"
    assert create_topic(raw, topic, partitions=1)[0] == 0
    made: list[str] = []

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(getattr(coro, "__qualname__", repr(coro)))
        return asyncio.Task(coro, loop=loop, **kwargs)

    producer = raw.connect()
    fetcher = raw.connect()
    for client in (producer, fetcher):  # each connection's writer task started
        assert client.call(API_VERSIONS, 0, {}).error_code == 0
    _on_loop(broker, lambda: broker.loop.set_task_factory(counting))
    try:
        started = time.monotonic()
        fetcher.send(FETCH, 11, fetch_request(topic, 0, 0, max_wait_ms=20_000, min_bytes=1))
        _until(broker, lambda: _waiting_keys(broker, topic), "the fetch parked")
        slots = _on_loop(broker, lambda: _parked_slots(broker))
        assert len(slots) == 1
        work = slots[0].work
        assert isinstance(work, asyncio.Future) and not isinstance(work, asyncio.Task), type(work)
        _produce(producer, topic, 0, b"wakes the parked fetch")
        _got, fetched = fetcher.recv(FETCH, 11)
        waited = time.monotonic() - started
    finally:
        _on_loop(broker, lambda: broker.loop.set_task_factory(None))
    part = fetched.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1
    assert b"wakes the parked fetch" in bytes(part.records)
    assert waited < 10, f"answered after {waited:.1f} s, not by the append"
    assert made == [], f"tasks made while the fetch parked and was answered: {made}"
    assert _on_loop(broker, lambda: _waiting_keys(broker, topic)) == set()


def test_a_fetch_parked_when_its_connection_closes_releases_its_regions_and_waiters(broker, raw):
    topic = "parked-closing"
    assert create_topic(raw, topic, partitions=2)[0] == 0
    _produce(raw, topic, 0, b"pinned while the fetch waits")
    fetcher = raw.connect()
    body = fetch_request(topic, 0, 0, max_wait_ms=60_000, min_bytes=1 << 20)
    body["topics"][0]["partitions"].append({**body["topics"][0]["partitions"][0], "partition": 1})
    fetcher.send(FETCH, 11, body)
    keys = {(topic, 0), (topic, 1)}
    assert _until(broker, lambda: _waiting_keys(broker, topic) == keys, "the fetch parked on both partitions")
    slots = _on_loop(broker, lambda: _parked_slots(broker))
    assert len(slots) == 1
    ctx = slots[0].ctx
    pinned = _on_loop(broker, lambda: list(ctx.pinned))
    assert len(pinned) == 1 and pinned[0].size > 0  # partition 0's batch, held for the answer
    # The client goes away at once (a reset, as when its process dies): no half-close,
    # which the broker would answer by draining the fetch first.
    fetcher.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    fetcher.close()
    _until(broker, lambda: not _waiting_keys(broker, topic) and not _parked_slots(broker),
           "the closed connection's fetch left the waiters")
    assert _on_loop(broker, lambda: list(ctx.pinned)) == []
    # The broker serves on: a new fetch of the same partition reads the batch.
    again = raw.call(FETCH, 11, fetch_request(topic, 0, 0))
    assert b"pinned while the fetch waits" in bytes(again.responses[0].partitions[0].records)


def test_under_a_request_time_quota_a_parked_fetch_is_awaited_by_a_task_and_woken(broker, raw):
    """Request-time quotas measure a request's own steps: a parked fetch then goes the
    Python way (a coroutine awaiting the parked fetch), still woken by the append."""
    topic = "parked-quota"
    assert create_topic(raw, topic, partitions=1)[0] == 0
    quota = {"entries": [{"entity": [{"entity_type": "client-id", "entity_name": None}],
                          "ops": [{"key": "request_percentage", "value": 10_000.0, "remove": False}]}],
             "validate_only": False}
    assert raw.call(49, 1, quota).entries[0].error_code == 0
    _until(broker, lambda: broker.broker.quotas.times_requests, "the request-time quota in force")
    fetcher = raw.connect()
    started = time.monotonic()
    fetcher.send(FETCH, 11, fetch_request(topic, 0, 0, max_wait_ms=20_000, min_bytes=1))
    _until(broker, lambda: _waiting_keys(broker, topic), "the fetch parked")
    slots = _on_loop(broker, lambda: _parked_slots(broker))
    assert len(slots) == 1 and isinstance(slots[0].work, asyncio.Task)
    _produce(raw, topic, 0, b"wakes it under a quota")
    _got, fetched = fetcher.recv(FETCH, 11)
    assert time.monotonic() - started < 10
    part = fetched.responses[0].partitions[0]
    assert part.error_code == 0 and b"wakes it under a quota" in bytes(part.records)
    assert fetched.throttle_time_ms == 0
    assert _on_loop(broker, lambda: _waiting_keys(broker, topic)) == set()
