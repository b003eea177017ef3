"""A long-poll Fetch parks on the loop turn after its first read: an append made in
between (a Produce later in the same read, or on another connection served in the same
turn) must still wake it, not leave it waiting out its max_wait_ms."""

from __future__ import annotations

import time

from pykfk._core.records import build_batch
from pykfk.protocol import framing

from .test_handlers import FETCH, PRODUCE, create_topic, fetch_request

TOPIC = "catch-up"


def _frame(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    return framing.encode_request(api_key, version, correlation_id, "catch-up", body)


def test_a_produce_behind_a_long_poll_fetch_in_the_same_read_wakes_it(raw):
    assert create_topic(raw, TOPIC, partitions=1)[0] == 0
    produce = {"transactional_id": None, "acks": 1, "timeout_ms": 5000,
               "topic_data": [{"name": TOPIC, "partition_data": [
                   {"index": 0, "records": build_batch([(None, b"behind the fetch", 1000, [])])}]}]}
    started = time.monotonic()
    raw.sock.sendall(_frame(FETCH, 11, 1, fetch_request(TOPIC, 0, 0, max_wait_ms=8000, min_bytes=1))
                     + _frame(PRODUCE, 7, 2, produce))
    got, fetched = raw.recv(FETCH, 11)
    waited = time.monotonic() - started
    assert got == 1
    part = fetched.responses[0].partitions[0]
    assert part.error_code == 0 and part.high_watermark == 1
    assert b"behind the fetch" in bytes(part.records)
    assert waited < 4, f"answered after {waited:.1f} s: the append before the fetch parked was missed"
    got, produced = raw.recv(PRODUCE, 7)
    assert got == 2 and produced.responses[0].partition_responses[0].base_offset == 0
