"""Produce fast path: compiled ProduceRequest walk and ProduceResponse encoder (v0-v9).

Both return exactly what the generic codec (``pykfk.protocol``) returns for the same
input; the differential tests in ``tests/protocol/test_fast_path_wire.py`` enforce it.
"""

from typing import Any

from typing_extensions import Buffer

PRODUCE_MIN_VERSION: int
PRODUCE_MAX_VERSION: int
PRODUCE_FLEXIBLE_FROM: int

def decode_request_header(frame: Buffer, flexible: bool) -> tuple[str | None, int]:
    """``(client_id, body_offset)`` of the request header at the start of ``frame`` (no
    size prefix), header v2 when ``flexible``; the values and failures (ProtocolError) of
    ``pykfk.protocol.framing.decode_request_header``."""

def decode_produce(
    frame: Buffer, offset: int, version: int
) -> tuple[str | None, int, int, list[tuple[str, list[tuple[int, memoryview | None]]]]]:
    """The ProduceRequest body of ``frame`` (no size prefix) from ``offset`` to its end:
    ``(transactional_id, acks, timeout_ms, [(topic, [(partition, records)])])``.

    ``records`` are memoryview slices of ``frame`` (no copy; writable when the frame is),
    None where the request carries null records. ProtocolError for bytes that do not
    decode at ``version`` (truncation, bad lengths or counts, invalid UTF-8, trailing
    bytes); ValueError for a version outside 0-9 or an offset outside the frame.
    """

def encode_produce_response(version: int, correlation_id: int, body: Any) -> bytes:
    """The whole ProduceResponse frame (size prefix, header, body) as one bytes object,
    equal to ``b"".join(pykfk.protocol.framing.encode_response(0, version, cid, body))``.
    ValueError/OverflowError for values that do not fit the declared fields."""
