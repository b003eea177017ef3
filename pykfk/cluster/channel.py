"""An asyncio connection from this broker to another one (replica fetchers): requests
encoded with ``pykfk.protocol``'s codec, one at a time, every step bounded by a timeout.

Frames on the wire are an int32 size and the bytes (Kafka protocol guide, "Network");
responses come back in request order and carry the request's correlation id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
from typing import Any

from pykfk.protocol import ProtocolError, decode_response, encode_request

_SIZE = struct.Struct(">i")
# Largest response frame accepted from a peer (a Fetch is bounded by replica.fetch.response.max.bytes).
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


class ChannelError(ConnectionError):
    """The connection failed, timed out or carried a malformed frame; it is closed."""


class BrokerChannel:
    """One TCP connection to ``host:port``. Loop-affine; not shared between tasks."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = itertools.count(1)

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, limit=1 << 20), self.timeout_s
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise ChannelError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc

    async def request(self, api_key: int, api_version: int, body: dict, *, timeout_s: float | None = None) -> Any:
        """Send one request and return the decoded response body."""
        if not self.connected:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(api_key, api_version, correlation_id, self.client_id, body)
        try:
            self._writer.write(frame)
            await asyncio.wait_for(self._read_response(api_key, api_version, correlation_id),
                                   timeout_s or self.timeout_s)
            return self._response
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ProtocolError) as exc:
            self.close()
            raise ChannelError(f"request {api_key} v{api_version} to {self.host}:{self.port} failed: {exc!r}") from exc
        except BaseException:
            self.close()  # cancelled mid-request: the stream position is unknown
            raise

    async def _read_response(self, api_key: int, api_version: int, correlation_id: int) -> None:
        assert self._reader is not None and self._writer is not None
        await self._writer.drain()
        (size,) = _SIZE.unpack(await self._reader.readexactly(4))
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise ProtocolError(f"response frame size {size}")
        frame = bytearray(await self._reader.readexactly(size))
        got, body = decode_response(api_key, api_version, memoryview(frame))
        if got != correlation_id:
            raise ProtocolError(f"correlation id {got}, expected {correlation_id}")
        self._response = body

    def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            with contextlib.suppress(Exception):
                writer.close()
