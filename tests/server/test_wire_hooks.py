"""The Produce handler's compiled decode/encode hooks give what the generic table codec
gives, and the dispatcher's compiled header reader agrees with the generic framing."""

from __future__ import annotations

import pytest

from pykfk._core.wire import decode_request_header
from pykfk.protocol import API_SPECS, ProtocolError, framing
from pykfk.server import dispatch
from pykfk.server.handlers import produce
from pykfk.server.session import PLAINTEXT_SECURITY, Session

BODY = {
    "transactional_id": "tx",
    "acks": -1,
    "timeout_ms": 1500,
    "topic_data": [
        {"name": "a", "partition_data": [{"index": 0, "records": b"\x01" * 80}, {"index": 1, "records": None}]},
        {"name": "b", "partition_data": [{"index": 5, "records": b""}]},
    ],
}
RESPONSE = {
    "responses": [{"name": "a", "partition_responses": [{"index": 0, "error_code": 0, "base_offset": 9}]}],
    "throttle_time_ms": 0,
}
PRODUCE = API_SPECS[0]


def _frame(version: int) -> memoryview:
    return memoryview(bytearray(framing.encode_request(0, version, 1, "c", BODY)[4:]))


@pytest.mark.parametrize("version", range(3, 10))
def test_decode_hook_matches_the_generic_codec(version: int) -> None:
    view = _frame(version)
    _header, offset = framing.decode_request_header(view)
    compiled = produce.decode_request(view, offset, version)
    generic = PRODUCE.decode_request(view, offset, version)
    assert compiled == (
        generic.transactional_id,
        generic.acks,
        generic.timeout_ms,
        [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in generic.topic_data],
    )
    assert compiled == ("tx", -1, 1500, [("a", [(0, b"\x01" * 80), (1, None)]), ("b", [(5, b"")])])
    with pytest.raises(ProtocolError):
        produce.decode_request(view[:-1], offset, version)


@pytest.mark.parametrize("version", range(10))
def test_encode_hook_matches_the_generic_codec(version: int) -> None:
    compiled = produce.encode_response(version, 77, RESPONSE)
    assert b"".join(compiled) == b"".join(framing.encode_response(0, version, 77, RESPONSE))


@pytest.mark.parametrize("version", [7, 9])
def test_compiled_header_reader_matches_the_framing(version: int) -> None:
    frame = memoryview(bytearray(framing.encode_request(0, version, 5, "client-é", BODY)[4:]))
    header, generic_offset = framing.decode_request_header(frame)
    client_id, offset = decode_request_header(frame, version >= PRODUCE.flexible_from)
    assert (client_id, offset) == (header.client_id, generic_offset) == ("client-é", generic_offset)


def test_dispatcher_hands_the_handler_the_decoded_request() -> None:
    frame = bytearray(framing.encode_request(0, 7, 5, "client-é", BODY)[4:])
    registry = dispatch.Registry([produce])
    seen = []

    def handle(ctx: dispatch.RequestContext, request: object) -> None:
        seen.append((ctx.client_id, ctx.correlation_id, ctx.api_version, request))

    registry._handlers[0] = dispatch.ApiHandler(
        0, "Produce", 0, 9, handle, produce.decode_request, produce.encode_response, 9
    )
    dispatcher = dispatch.Dispatcher(broker=None, registry=registry)  # type: ignore[arg-type]
    work, ctx = dispatcher.prepare(frame, Session(PLAINTEXT_SECURITY, "h"))
    assert work is None and ctx is not None and ctx.pinned == []
    assert seen == [("client-é", 5, 7, ("tx", -1, 1500, [("a", [(0, b"\x01" * 80), (1, None)]), ("b", [(5, b"")])]))]
