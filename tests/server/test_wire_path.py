"""The request path without a task per request: Produce answered at once, waiting
requests (long-poll Fetch) in their own task, and responses still strictly in request
order, over a real socket."""

from __future__ import annotations

import struct
import time

from pykfk._core.records import build_batch
from pykfk.protocol import framing

from .test_handlers import FETCH, METADATA, PRODUCE, create_topic, fetch_request

TOPIC = "wire-path"


def _produce_body(records: bytes, acks: int = 1, topic: str = TOPIC, partition: int = 0) -> dict:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }


def _batch(n: int = 3) -> bytes:
    return build_batch([(None, b"v%d" % i, 1000 + i, []) for i in range(n)])


def _frame(api_key: int, version: int, correlation_id: int, body: dict) -> bytes:
    return framing.encode_request(api_key, version, correlation_id, "wire", body)


def test_pipelined_produce_burst_is_answered_in_order_with_consecutive_offsets(raw):
    assert create_topic(raw, TOPIC)[0] == 0
    frames = b"".join(_frame(PRODUCE, 7, 100 + i, _produce_body(_batch(2))) for i in range(200))
    raw.sock.sendall(frames)  # one write: many frames arrive in one read
    offsets = []
    for i in range(200):
        correlation_id, response = raw.recv(PRODUCE, 7)
        assert correlation_id == 100 + i
        partition = response.responses[0].partition_responses[0]
        assert partition.error_code == 0
        offsets.append(partition.base_offset)
    assert offsets == list(range(0, 400, 2))


def test_a_waiting_fetch_holds_back_the_produce_answers_behind_it(raw):
    assert create_topic(raw, TOPIC)[0] == 0
    wait_ms = 400
    frames = (
        _frame(PRODUCE, 7, 1, _produce_body(_batch())),
        # Parks: min_bytes above anything the topic holds, so it waits max_wait_ms.
        _frame(FETCH, 11, 2, fetch_request(TOPIC, 0, 0, max_wait_ms=wait_ms, min_bytes=1 << 20)),
        _frame(PRODUCE, 7, 3, _produce_body(_batch())),
        _frame(METADATA, 1, 4, {"topics": None}),
    )
    started = time.monotonic()
    raw.sock.sendall(b"".join(frames))
    got = []
    for api_key, version in ((PRODUCE, 7), (FETCH, 11), (PRODUCE, 7), (METADATA, 1)):
        correlation_id, response = raw.recv(api_key, version)
        got.append((correlation_id, time.monotonic() - started))
        if api_key == PRODUCE:
            assert response.responses[0].partition_responses[0].error_code == 0
    assert [c for c, _ in got] == [1, 2, 3, 4]
    # The answer after the fetch waited for it, though the produce itself was done at once.
    assert got[2][1] >= wait_ms / 1000 * 0.9


def test_failed_acks_zero_produce_closes_only_after_earlier_answers(raw):
    assert create_topic(raw, TOPIC)[0] == 0
    frames = (
        _frame(PRODUCE, 7, 1, _produce_body(_batch())),
        _frame(PRODUCE, 7, 2, _produce_body(b"\x00" * 70, acks=0)),  # corrupt: fails
        _frame(PRODUCE, 7, 3, _produce_body(_batch())),
    )
    raw.sock.sendall(b"".join(frames))
    correlation_id, response = raw.recv(PRODUCE, 7)
    assert correlation_id == 1
    assert response.responses[0].partition_responses[0].error_code == 0
    assert raw.is_closed_by_peer()


def test_acks_zero_sends_nothing_and_the_next_answer_follows(raw):
    assert create_topic(raw, TOPIC)[0] == 0
    frames = (
        _frame(PRODUCE, 7, 1, _produce_body(_batch(), acks=0)),
        _frame(PRODUCE, 7, 2, _produce_body(_batch(), acks=0)),
        _frame(PRODUCE, 7, 3, _produce_body(_batch())),
    )
    raw.sock.sendall(b"".join(frames))
    correlation_id, response = raw.recv(PRODUCE, 7)
    assert correlation_id == 3
    assert response.responses[0].partition_responses[0].base_offset == 6


def test_invalid_acks_and_unknown_partition_answer_with_error_codes(raw):
    assert create_topic(raw, TOPIC)[0] == 0
    body = _produce_body(_batch(), acks=2)
    raw.sock.sendall(_frame(PRODUCE, 7, 1, body))
    _cid, response = raw.recv(PRODUCE, 7)
    assert response.responses[0].partition_responses[0].error_code == 21  # INVALID_REQUIRED_ACKS
    raw.sock.sendall(_frame(PRODUCE, 7, 2, _produce_body(_batch(), partition=9)))
    _cid, response = raw.recv(PRODUCE, 7)
    assert response.responses[0].partition_responses[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_truncated_produce_closes_the_connection(raw):
    assert create_topic(raw, TOPIC)[0] == 0
    frame = _frame(PRODUCE, 7, 1, _produce_body(_batch()))
    cut = frame[4:-5]
    raw.sock.sendall(struct.pack(">i", len(cut)) + cut)
    assert raw.is_closed_by_peer()
