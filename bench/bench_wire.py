"""Per-request protocol cost of a Produce request: pykfk._core.wire against the generic
table-driven codec (pykfk.protocol), and the whole in-process request path.

    python -m pytest bench/bench_wire.py                       # figures + table
    python -m pytest bench/bench_wire.py --benchmark-disable   # one quick pass (CI)

The request is what confluent-kafka sends at batch.num.messages=50: Produce v7, one topic,
one partition, one ~10.6 KiB batch of 50 x 200-byte records. Columns: compiled fast path,
generic codec (the reference path, also the fallback without the core), and for the
header the stdlib baseline of one struct.unpack_from. Times are best-of-N with the
candidates taking turns (the machine is shared).
"""

from __future__ import annotations

import struct

import pytest

from bench.timing import best_of_rounds
from pykfk._core import wire
from pykfk._core.records import build_batch
from pykfk.protocol import API_SPECS, framing

SPEC = API_SPECS[0]
VERSION = 7
BATCH = build_batch([(None, b"x" * 200, 1_700_000_000_000 + i, []) for i in range(50)])
FRAME = bytearray(
    framing.encode_request(
        0,
        VERSION,
        42,
        "rdkafka",
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": BATCH}]}],
        },
    )[4:]
)
VIEW = memoryview(FRAME)
_HEADER, BODY_OFFSET = framing.decode_request_header(VIEW)
RESPONSE = {
    "responses": [
        {
            "name": "bench",
            "partition_responses": [
                {"index": 0, "error_code": 0, "base_offset": 123456, "log_append_time_ms": -1, "log_start_offset": 0}
            ],
        }
    ],
    "throttle_time_ms": 0,
}
_FIXED = struct.Struct(">hhih")


def _effort(benchmark: object) -> tuple[int, int]:
    return (2, 20) if getattr(benchmark, "disabled", False) else (20, 2000)


@pytest.mark.benchmark(group="produce-request")
def test_decode(benchmark, report) -> None:  # type: ignore[no-untyped-def]
    rounds, calls = _effort(benchmark)
    t = best_of_rounds(
        {
            "wire.decode_produce": lambda: wire.decode_produce(VIEW, BODY_OFFSET, VERSION),
            "generic": lambda: SPEC.decode_request(VIEW, BODY_OFFSET, VERSION),
            "wire.decode_request_header": lambda: wire.decode_request_header(VIEW, False),
            "framing.decode_request_header": lambda: framing.decode_request_header(VIEW),
            "struct.unpack_from": lambda: _FIXED.unpack_from(VIEW, 0),
        },
        rounds,
        calls,
    )
    report(
        "Produce v7 body: wire {:.2f} us | generic {:.2f} us; header: wire {:.2f} us | framing {:.2f} us | "
        "struct.unpack_from {:.2f} us".format(
            *(t[k] * 1e6 for k in (
                "wire.decode_produce", "generic", "wire.decode_request_header",
                "framing.decode_request_header", "struct.unpack_from"))
        )
    )
    assert wire.decode_produce(VIEW, BODY_OFFSET, VERSION)[3][0][1][0][1] == BATCH
    benchmark(wire.decode_produce, VIEW, BODY_OFFSET, VERSION)


@pytest.mark.benchmark(group="produce-response")
def test_encode(benchmark, report) -> None:  # type: ignore[no-untyped-def]
    rounds, calls = _effort(benchmark)
    t = best_of_rounds(
        {
            "wire.encode_produce_response": lambda: wire.encode_produce_response(VERSION, 42, RESPONSE),
            "framing.encode_response": lambda: framing.encode_response(0, VERSION, 42, RESPONSE),
        },
        rounds,
        calls,
    )
    report(
        f"Produce v7 response: wire {t['wire.encode_produce_response'] * 1e6:.2f} us | "
        f"generic {t['framing.encode_response'] * 1e6:.2f} us"
    )
    benchmark(wire.encode_produce_response, VERSION, 42, RESPONSE)
