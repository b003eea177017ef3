"""Fixtures for server tests: a raw Kafka-protocol client over a plain socket."""

from __future__ import annotations

import socket
import struct

import pytest

from pykfk.protocol import framing

SOCKET_TIMEOUT = 10.0


class RawClient:
    """One TCP connection speaking request/response frames, nothing clever: tests send
    exactly the bytes they mean, hostile or not."""

    def __init__(self, host: str, port: int, timeout: float = SOCKET_TIMEOUT):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next_correlation = 1

    def close(self) -> None:
        self.sock.close()

    def send(self, api_key: int, version: int, body: dict, client_id: str | None = "raw") -> int:
        correlation_id = self._next_correlation
        self._next_correlation += 1
        self.sock.sendall(framing.encode_request(api_key, version, correlation_id, client_id, body))
        return correlation_id

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._recv_exactly(4))[0]
        return self._recv_exactly(size)

    def recv(self, api_key: int, version: int) -> tuple[int, object]:
        return framing.decode_response(api_key, version, self.recv_frame())

    def call(self, api_key: int, version: int, body: dict) -> object:
        correlation_id = self.send(api_key, version, body)
        got, response = self.recv(api_key, version)
        assert got == correlation_id
        return response

    def _recv_exactly(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(min(n, 1 << 20))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def is_closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True when the broker closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False


@pytest.fixture
def broker(pykfk_broker_inprocess):
    return pykfk_broker_inprocess


@pytest.fixture
def raw(broker):
    clients = []

    def connect() -> RawClient:
        client = RawClient(broker.host, broker.port)
        clients.append(client)
        return client

    client = connect()
    client.connect = connect
    yield client
    for c in clients:
        c.close()
