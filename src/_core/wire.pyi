"""Produce and Fetch fast paths: compiled ProduceRequest walk and ProduceResponse
encoder (v0-v13), compiled FetchResponse encoder (v0-v18).

Each returns exactly what the generic codec (``pykfk.protocol``) returns for the same
input; the differential tests in ``tests/protocol/test_fast_path_wire.py`` and
``test_fast_path_fetch.py`` enforce it.
"""

from typing import Any
from uuid import UUID

from typing_extensions import Buffer

from pykfk._core.structs import Struct

INLINE_RECORDS_MAX: int
ZERO_UUID: UUID
PRODUCE_MIN_VERSION: int
PRODUCE_MAX_VERSION: int
PRODUCE_FLEXIBLE_FROM: int
PRODUCE_LEADER_HINTS_FROM: int
PRODUCE_TOPIC_IDS_FROM: int

def cut_frames(buf: Buffer, start: int, end: int, limit: int) -> tuple[list[bytearray], int]:
    """The frames complete in ``buf[start:end]`` (4-byte big-endian size, then the body):
    ``(bodies, next)``, bodies copied into bytearrays, ``next`` the first byte not cut.
    Stops at an incomplete frame and before one whose size is negative or above
    ``limit``; ValueError for a range outside the buffer."""

def decode_request_header(frame: Buffer, flexible: bool) -> tuple[str | None, int]:
    """``(client_id, body_offset)`` of the request header at the start of ``frame`` (no
    size prefix), header v2 when ``flexible``; the values and failures (ProtocolError) of
    ``pykfk.protocol.framing.decode_request_header``."""

def decode_produce(
    frame: Buffer, offset: int, version: int
) -> tuple[str | None, int, int, list[tuple[str | UUID, list[tuple[int, memoryview | None]]]]]:
    """The ProduceRequest body of ``frame`` (no size prefix) from ``offset`` to its end:
    ``(transactional_id, acks, timeout_ms, [(topic, [(partition, records)])])``, ``topic``
    the name (v0-12) or the topic id (v13+).

    ``records`` are memoryview slices of ``frame`` (no copy; writable when the frame is),
    None where the request carries null records. ProtocolError for bytes that do not
    decode at ``version`` (truncation, bad lengths or counts, invalid UTF-8, trailing
    bytes); ValueError for a version outside 0-13 or an offset outside the frame.
    """

def encode_produce_response(version: int, correlation_id: int, body: Any) -> bytes:
    """The whole ProduceResponse frame (size prefix, header, body) as one bytes object,
    equal to ``b"".join(pykfk.protocol.framing.encode_response(0, version, cid, body))``.
    ValueError/OverflowError for values that do not fit the declared fields."""

FETCH_MIN_VERSION: int
FETCH_MAX_VERSION: int
FETCH_FLEXIBLE_FROM: int

def encode_fetch_response(version: int, correlation_id: int, body: Any) -> list[Any] | None:
    """The whole FetchResponse frame as chunks (bytes, with FileRegions and records
    buffers of at least INLINE_RECORDS_MAX bytes passed through in place), the bytes and
    layout of ``pykfk.protocol.framing.encode_response``; None for a body setting a field
    it leaves to that encoder (tagged fields, records as a list of chunks). ValueError
    for a version outside 0-18 or a value that does not fit its field."""

def decode_fetch(frame: Buffer, offset: int, version: int) -> Struct:
    """The FetchRequest body of ``frame`` (no size prefix) from ``offset`` to its end at
    ``version`` (0-18): the Struct of the generic decoder, every declared field present
    (defaults for those absent at ``version``). ProtocolError where that decoder fails;
    ValueError for a version outside 0-18."""
