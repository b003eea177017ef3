"""An asyncio connection from this broker to another one (replica fetchers): requests
encoded with ``pykfk.protocol``'s codec, one at a time, every step bounded by a timeout.

Frames on the wire are an int32 size and the bytes (Kafka protocol guide, "Network");
responses come back in request order and carry the request's correlation id.

Receiving is an ``asyncio.BufferedProtocol``: the socket reads go straight into the
response's own buffer, sized from its length prefix, so a Fetch response's record bytes
are copied once (kernel to that buffer) and the decoded records are views into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
import socket
import ssl
import struct
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from pykfk.protocol import ProtocolError, decode_response, encode_request

_SIZE = struct.Struct(">i")
# Largest response frame accepted from a peer (a Fetch is bounded by replica.fetch.response.max.bytes).
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class ChannelSecurity:
    """How this broker reaches others: TLS (a client context) and a SASL login, as the
    inter-broker listener asks."""

    ssl_context: ssl.SSLContext | None = None
    sasl_mechanism: str = ""
    sasl_user: str = ""
    sasl_password: str = ""
    # OAUTHBEARER: gives the current token (pykfk.security.oauth_login), and its extensions.
    bearer_token: Callable[[], Awaitable[str]] | None = None
    sasl_extensions: Mapping[str, str] = dataclasses.field(default_factory=dict)


class ChannelError(ConnectionError):
    """The connection failed, timed out or carried a malformed frame; it is closed."""


class _ResponseReader(asyncio.BufferedProtocol):
    """Cuts the byte stream into frames; hands each whole frame to ``on_frame``.

    State: the 4-byte size prefix is gathered in ``_prefix``; then ``_frame`` (exactly the
    announced size) is filled and delivered. A frame outside [4, MAX_RESPONSE_BYTES], or
    bytes arriving when no response is awaited, closes the connection.
    """

    def __init__(self, channel: BrokerChannel):
        self._channel = channel
        self._prefix = bytearray(4)
        self._prefix_got = 0
        self._frame: bytearray | None = None
        self._frame_got = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is None:
            return memoryview(self._prefix)[self._prefix_got :]
        return memoryview(self._frame)[self._frame_got :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is None:
            self._prefix_got += nbytes
            if self._prefix_got < 4:
                return
            (size,) = _SIZE.unpack(self._prefix)
            self._prefix_got = 0
            if not 4 <= size <= MAX_RESPONSE_BYTES:
                self._channel._failed(self, ProtocolError(f"response frame size {size}"))
                return
            self._frame = bytearray(size)
            self._frame_got = 0
            return
        self._frame_got += nbytes
        if self._frame_got == len(self._frame):
            frame, self._frame = self._frame, None
            self._channel._frame_received(self, frame)

    def eof_received(self) -> bool | None:
        self._channel._failed(self, ConnectionResetError("connection closed by the peer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._channel._failed(self, exc or ConnectionResetError("connection closed"))


class BrokerChannel:
    """One TCP connection to ``host:port``. Loop-affine; not shared between tasks."""

    def __init__(self, host: str, port: int, *, client_id: str, timeout_s: float = 30.0,
                 security: ChannelSecurity | None = None):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.security = security or ChannelSecurity()
        self._transport: asyncio.Transport | None = None
        self._reader: _ResponseReader | None = None  # callbacks from older connections are ignored
        self._waiter: asyncio.Future[bytearray] | None = None
        self._correlation = itertools.count(1)
        self._reauth_at = 0.0  # monotonic: log in again before the session ends (KIP-368); 0: never

    @property
    def connected(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        security = self.security
        try:
            transport, reader = await asyncio.wait_for(
                loop.create_connection(lambda: _ResponseReader(self), self.host, self.port,
                                       ssl=security.ssl_context,
                                       server_hostname=self.host if security.ssl_context else None),
                self.timeout_s,
            )
        except (OSError, asyncio.TimeoutError) as exc:
            raise ChannelError(f"cannot connect to {self.host}:{self.port}: {exc!r}") from exc
        self._transport, self._reader = transport, reader
        if security.sasl_mechanism:
            await self._log_in()

    async def _log_in(self) -> None:
        """SaslHandshake v1 and SaslAuthenticate rounds until the login completes; again
        on the same connection before a session with a lifetime ends (KIP-368)."""
        from pykfk.security.sasl import SaslClient
        from pykfk.security.scram import ScramError

        security = self.security
        self._reauth_at = 0.0
        try:
            bearer = await security.bearer_token() if security.bearer_token is not None else ""
        except OSError as exc:  # the identity provider gave no token
            self.close()
            raise ChannelError(f"no OAUTHBEARER token for {self.host}:{self.port}: {exc}") from None
        handshake = await self.request(17, 1, {"mechanism": security.sasl_mechanism})
        if handshake.error_code:
            self.close()
            raise ChannelError(f"{self.host}:{self.port} refused SASL/{security.sasl_mechanism} "
                               f"(error {handshake.error_code})")
        client = SaslClient(security.sasl_mechanism, security.sasl_user, security.sasl_password,
                            dict(security.sasl_extensions), bearer_token=bearer)
        token: bytes | None = client.first()
        try:
            while token is not None:
                answer = await self.request(36, 1, {"auth_bytes": token})
                if answer.error_code:
                    raise ChannelError(f"SASL login to {self.host}:{self.port} failed: {answer.error_message}")
                token = client.step(bytes(answer.auth_bytes))
        except (ChannelError, ScramError) as exc:
            self.close()
            raise ChannelError(str(exc)) from None
        if answer.session_lifetime_ms > 0:  # as Kafka's clients: at 85-95% of the lifetime
            self._reauth_at = time.monotonic() + answer.session_lifetime_ms * random.uniform(0.85, 0.95) / 1000

    async def request(self, api_key: int, api_version: int, body: dict[str, Any], *, timeout_s: float | None = None) -> Any:
        """Send one request and return the decoded response body."""
        if not self.connected:
            await self.connect()
        elif self._reauth_at and time.monotonic() >= self._reauth_at:
            await self._log_in()
        assert self._transport is not None
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(api_key, api_version, correlation_id, self.client_id, body)
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = loop.call_later(timeout_s or self.timeout_s, _time_out, waiter)
        try:
            self._transport.write(frame)
            response = await waiter
            (got,) = _SIZE.unpack_from(response, 0)  # the header starts with the correlation id
            if got != correlation_id:
                raise ProtocolError(f"correlation id {got}, expected {correlation_id}")
            return decode_response(api_key, api_version, memoryview(response))[1]
        except (OSError, asyncio.TimeoutError, ProtocolError) as exc:
            self.close()
            raise ChannelError(f"request {api_key} v{api_version} to {self.host}:{self.port} failed: {exc!r}") from exc
        except BaseException:
            self.close()  # cancelled mid-request: the stream position is unknown
            raise
        finally:
            timer.cancel()
            self._waiter = None

    def _frame_received(self, reader: _ResponseReader, frame: bytearray) -> None:
        if reader is not self._reader:
            return
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._failed(reader, ProtocolError("a response nobody asked for"))
            return
        waiter.set_result(frame)

    def _failed(self, reader: _ResponseReader, exc: BaseException) -> None:
        if reader is not self._reader:
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        transport, self._transport, self._reader = self._transport, None, None
        if transport is not None:
            with contextlib.suppress(Exception):
                transport.abort()


# How to reach a broker: (host, port, socket timeout in seconds, security), None when it
# has no address on the inter-broker listener.
PeerAddress = tuple[str, int, float, "ChannelSecurity | None"]


def peer_address(broker: Any, broker_id: int) -> PeerAddress | None:
    """How ``broker`` (a running broker: its metadata and replica manager) reaches
    ``broker_id`` on the inter-broker listener."""
    found = broker.metadata.get_broker(broker_id)
    settings = broker.replica_manager.settings
    address = found.address(settings.listener) if found is not None else None
    if address is None:
        return None
    return address[0], address[1], settings.socket_timeout_ms / 1000, settings.channel_security


class PeerChannels:
    """One channel to each other broker, one request at a time on each (requests queue
    on the broker's lock); a channel whose request fails is closed, and the next request
    opens a new one."""

    def __init__(self, client_id: str, peer: Callable[[int], PeerAddress | None]):
        self.client_id = client_id
        self._peer = peer
        self._channels: dict[int, BrokerChannel] = {}
        self._locks: dict[int, asyncio.Lock] = {}

    async def request(self, broker_id: int, api_key: int, api_version: int, body: dict[str, Any], *,
                      timeout_s: float | None = None) -> Any:
        """The decoded response; ChannelError when ``broker_id`` cannot be reached or
        did not answer."""
        lock = self._locks.setdefault(broker_id, asyncio.Lock())
        try:
            async with lock:
                return await self._channel(broker_id).request(api_key, api_version, body, timeout_s=timeout_s)
        except BaseException:
            stale = self._channels.pop(broker_id, None)
            if stale is not None:
                stale.close()
            raise

    def _channel(self, broker_id: int) -> BrokerChannel:
        found = self._peer(broker_id)
        if found is None:
            raise ChannelError(f"broker {broker_id} is not reachable")
        host, port, timeout_s, security = found
        channel = self._channels.get(broker_id)
        if channel is None or (channel.host, channel.port) != (host, port):
            if channel is not None:
                channel.close()
            channel = self._channels[broker_id] = BrokerChannel(host, port, client_id=self.client_id,
                                                                timeout_s=timeout_s, security=security)
        return channel

    def close(self) -> None:
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()


def _time_out(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(asyncio.TimeoutError())
