"""The Produce handler's decode/encode hooks give the same values with and without the
compiled core (the fallback is the generic codec), and the dispatcher reads request
headers the same way on both paths."""

from __future__ import annotations

import pytest

from pykfk.protocol import ProtocolError, framing
from pykfk.server import dispatch
from pykfk.server.handlers import produce

pytest.importorskip("pykfk._core.wire")

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


def _frame(version: int) -> memoryview:
    return memoryview(bytearray(framing.encode_request(0, version, 1, "c", BODY)[4:]))


@pytest.mark.parametrize("version", range(3, 10))
def test_decode_hook_same_with_and_without_the_core(version: int, monkeypatch) -> None:
    view = _frame(version)
    _header, offset = framing.decode_request_header(view)
    compiled = produce.decode_request(view, offset, version)
    monkeypatch.setattr(produce, "_decode_compiled", None)
    assert produce.decode_request(view, offset, version) == compiled
    assert compiled == ("tx", -1, 1500, [("a", [(0, b"\x01" * 80), (1, None)]), ("b", [(5, b"")])])
    with pytest.raises(ProtocolError):
        produce.decode_request(view[:-1], offset, version)


@pytest.mark.parametrize("version", range(10))
def test_encode_hook_same_with_and_without_the_core(version: int, monkeypatch) -> None:
    compiled = produce.encode_response(version, 77, RESPONSE)
    monkeypatch.setattr(produce, "_encode_compiled", None)
    assert b"".join(produce.encode_response(version, 77, RESPONSE)) == b"".join(compiled)


def test_request_struct_carries_what_the_cluster_path_reads() -> None:
    view = _frame(7)
    _header, offset = framing.decode_request_header(view)
    request = produce._request_struct(produce.decode_request(view, offset, 7))
    assert request == produce._SPEC.decode_request(view, offset, 7)


@pytest.mark.parametrize("version", [7, 9])
def test_dispatch_header_fallback(version: int, monkeypatch) -> None:
    frame = bytearray(framing.encode_request(0, version, 5, "client-é", BODY)[4:])
    registry = dispatch.Registry([produce])
    seen = []

    def handle(ctx, request):
        seen.append((ctx.client_id, ctx.correlation_id, request))

    registry._handlers[0] = dispatch.ApiHandler(
        0, "Produce", 0, 9, handle, produce.decode_request, produce.encode_response, 9
    )
    dispatcher = dispatch.Dispatcher(broker=None, registry=registry)  # type: ignore[arg-type]
    assert dispatcher.prepare(frame, "h") == (None, [])
    monkeypatch.setattr(dispatch, "_decode_header_compiled", None)
    assert dispatcher.prepare(frame, "h") == (None, [])
    assert seen[0][:2] == seen[1][:2] == ("client-é", 5)
    assert seen[0][2] == seen[1][2]
