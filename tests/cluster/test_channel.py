"""BrokerChannel against a real TCP server on 127.0.0.1 that answers with hand-made frames:
responses cut into small pieces, a Fetch response whose records arrive as a view of the
received frame, and every failure (bad size, peer close, silence) as ChannelError, after
which the next request connects again."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from pykfk.cluster.channel import BrokerChannel, ChannelError
from pykfk.protocol import framing

API_VERSIONS = 18
FETCH = 1



class FrameServer:
    """Reads request frames; ``answer`` gives the bytes to send back (None: stay silent,
    b"" : close the connection). Bytes are written ``piece`` at a time with a pause, so
    the client sees them in many reads."""

    def __init__(self, answer: Callable[[int, int, int], bytes | None], piece: int = 0):
        self.answer = answer
        self.piece = piece
        self.connections = 0
        self.server: asyncio.AbstractServer | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame)
                data = self.answer(api_key, api_version, correlation_id)
                if data is None:
                    continue
                if not data:
                    break
                step = self.piece or len(data)
                for i in range(0, len(data), step):
                    writer.write(data[i : i + step])
                    await writer.drain()
                    if self.piece:
                        await asyncio.sleep(0.001)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[FrameServer] = []

    async def start(answer: Callable[[int, int, int], bytes | None], piece: int = 0) -> tuple[FrameServer, BrokerChannel]:
        server = FrameServer(answer, piece)
        port = await server.start()
        servers.append(server)
        return server, BrokerChannel("127.0.0.1", port, client_id="test", timeout_s=2.0)

    yield start
    for server in servers:
        assert server.server is not None
        server.server.close()


def response(api_key: int, api_version: int, correlation_id: int, body: dict) -> bytes:
    return b"".join(bytes(c) for c in framing.encode_response(api_key, api_version, correlation_id, body))


def api_versions_answer(api_key: int, api_version: int, correlation_id: int) -> bytes:
    body = {"error_code": 0, "api_keys": [{"api_key": 1, "min_version": 0, "max_version": 11}]}
    return response(api_key, api_version, correlation_id, body)


async def test_response_in_small_pieces(serve):
    _server, channel = await serve(api_versions_answer, piece=3)
    try:
        for _ in range(3):  # several requests on one connection, correlation ids advance
            body = await channel.request(API_VERSIONS, 0, {})
            assert body.error_code == 0
            assert [(k.api_key, k.max_version) for k in body.api_keys] == [(1, 11)]
    finally:
        channel.close()


async def test_fetch_records_arrive_whole(serve):
    records = bytes(range(256)) * 4096  # 1 MiB, more than any single socket read

    def answer(api_key: int, api_version: int, correlation_id: int) -> bytes:
        partition = {"partition_index": 0, "error_code": 0, "high_watermark": 7, "last_stable_offset": 7,
                     "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1,
                     "records": records}
        body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": [{"topic": "t", "partitions": [partition]}]}
        return response(api_key, api_version, correlation_id, body)

    _server, channel = await serve(answer)
    request = {"replica_id": 1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 24, "isolation_level": 0,
               "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
               "topics": [{"topic": "t", "partitions": [{"partition": 0, "current_leader_epoch": 0, "fetch_offset": 0,
                                                          "log_start_offset": 0, "partition_max_bytes": 1 << 20}]}]}
    try:
        body = await channel.request(FETCH, 11, request)
        got = body.responses[0].partitions[0]
        assert got.high_watermark == 7
        assert bytes(got.records) == records
    finally:
        channel.close()


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda key, version, cid: struct.pack(">i", 2) + b"xx", "response frame size 2"),
        (lambda key, version, cid: struct.pack(">i", 1 << 30), "response frame size"),
        (lambda key, version, cid: b"", "closed"),
        (lambda key, version, cid: struct.pack(">ii", 4, cid + 1), "correlation id"),
    ],
    ids=["too-short", "too-long", "peer-closes", "wrong-correlation"],
)
async def test_failures_close_and_the_next_request_reconnects(serve, bad, message):
    calls = []

    def answer(api_key: int, api_version: int, correlation_id: int) -> bytes | None:
        calls.append(correlation_id)
        if len(calls) == 1:
            return bad(api_key, api_version, correlation_id)
        return api_versions_answer(api_key, api_version, correlation_id)

    server, channel = await serve(answer)
    try:
        with pytest.raises(ChannelError, match=message):
            await channel.request(API_VERSIONS, 0, {})
        assert not channel.connected
        body = await channel.request(API_VERSIONS, 0, {})
        assert body.error_code == 0
        assert server.connections == 2
    finally:
        channel.close()


async def test_silent_peer_times_out(serve):
    _server, channel = await serve(lambda key, version, cid: None)
    try:
        with pytest.raises(ChannelError, match="TimeoutError"):
            await channel.request(API_VERSIONS, 0, {}, timeout_s=0.2)
        assert not channel.connected
    finally:
        channel.close()


async def test_connect_refused():
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    channel = BrokerChannel("127.0.0.1", port, client_id="test", timeout_s=2.0)
    with pytest.raises(ChannelError, match="cannot connect"):
        await channel.request(API_VERSIONS, 0, {})
