"""A blocking connection to one broker: framing, ApiVersions negotiation, pipelined
requests and bounded timeouts (the synchronous core of pykfk's own clients).

Wire rules (Kafka protocol guide, "Network"): every frame is an int32 size then the
bytes; responses come back on one connection in request order, so a pipelined caller
matches them by position and checks the correlation id. Produce with acks=0 gets no
response at all.
"""

from __future__ import annotations

import collections
import itertools
import socket
import struct
import threading
import time
from typing import TYPE_CHECKING, Any

from pykfk.errors import ErrorCode, KafkaError
from pykfk.protocol import API_SPECS, ProtocolError, decode_response, encode_request

API_VERSIONS = 18
PRODUCE = 0

# The highest version of each API pykfk's clients speak. Produce 7 / Fetch 11 are the last
# non-flexible versions with zstd (KIP-110); Metadata 5 needs no leader epochs (they would
# oblige OffsetForLeaderEpoch validation); ListOffsets is chosen per call (v0 answers
# several offsets, the seeds' getOffsetsBefore).
CLIENT_MAX_VERSIONS = {
    0: 7,  # Produce
    1: 11,  # Fetch
    2: 3,  # ListOffsets
    3: 5,  # Metadata
    8: 3,  # OffsetCommit
    9: 3,  # OffsetFetch
    10: 2,  # FindCoordinator
    11: 5,  # JoinGroup
    12: 3,  # Heartbeat
    13: 1,  # LeaveGroup
    14: 3,  # SyncGroup
    18: 0,  # ApiVersions: v0 is answered by every broker
    19: 4,  # CreateTopics
    20: 5,  # DeleteTopics: v6 names topics by id
    22: 1,  # InitProducerId
}

_SIZE = struct.Struct(">i")
# Kafka's socket.request.max.bytes default; a larger size prefix means a broken stream.
MAX_FRAME_SIZE = 100 * 1024 * 1024

if TYPE_CHECKING:
    from typing_extensions import Self


class ConnectionError_(KafkaError):
    """The socket failed or timed out; the connection is closed. Retriable."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.NETWORK_EXCEPTION):
        super().__init__(code, message)


class InFlight:
    """A request sent on a connection whose response has not been read yet."""

    __slots__ = ("api_key", "correlation_id", "done", "response", "version")

    def __init__(self, api_key: int, version: int, correlation_id: int):
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id
        self.response: Any = None
        self.done = False


class BrokerConnection:
    """One TCP connection to ``host:port``.

    ``connect()`` opens it and negotiates versions (ApiVersions v0). ``request()`` sends
    and waits for the answer under a lock, so threads may share a connection for
    occasional control requests. The pipelined pair ``send()`` / ``receive()`` is for one
    owner thread (a producer's sender, a consumer's fetcher) that keeps several requests
    in flight. Any socket error or timeout closes the connection and raises
    ConnectionError_ (retriable); in-flight requests are lost with it.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "pykfk",
        connect_timeout: float = 10.0,
        request_timeout: float = 30.0,
        node_id: int = -1,
    ):
        self.host = host
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self.api_versions: dict[int, tuple[int, int]] = {}
        self._sock: socket.socket | None = None
        self._correlation = itertools.count(1)
        self._in_flight: collections.deque[InFlight] = collections.deque()
        self._lock = threading.RLock()
        self._rbuf = bytearray()

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port}, node {self.node_id})"

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def connect(self) -> BrokerConnection:
        if self._sock is not None:
            return self
        try:
            sock = socket.create_connection((self.host, self.port), self.connect_timeout)
        except OSError as exc:
            raise ConnectionError_(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(self.request_timeout)
        self._sock = sock
        self._rbuf = bytearray()
        try:
            body = self.request(API_VERSIONS, {}, version=0)
        except BaseException:
            self.close()
            raise
        if body.error_code:
            self.close()
            raise KafkaError(body.error_code, "ApiVersions refused")
        self.api_versions = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        return self

    def close(self) -> None:
        sock, self._sock = self._sock, None
        self._in_flight.clear()
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def version_for(self, api_key: int, max_version: int | None = None) -> int:
        """The highest version both sides speak; UNSUPPORTED_VERSION when none."""
        ours = CLIENT_MAX_VERSIONS.get(api_key, API_SPECS[api_key].max_version)
        if max_version is not None:
            ours = min(ours, max_version)
        spec = API_SPECS[api_key]
        if api_key == API_VERSIONS:
            return 0
        broker = self.api_versions.get(api_key)
        if broker is None:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"broker lacks {spec.name}")
        version = min(ours, broker[1], spec.max_version)
        if version < max(broker[0], spec.min_version):
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, f"no common {spec.name} version")
        return version

    # -------------------------------------------------------------- pipelined

    def send(
        self, api_key: int, body: Any, *, version: int | None = None, expect_response: bool = True
    ) -> InFlight:
        """Write one request; returns its InFlight (already done when no response comes)."""
        if self._sock is None:
            self.connect()
        if version is None:
            version = self.version_for(api_key)
        correlation_id = next(self._correlation) & 0x7FFFFFFF
        frame = encode_request(api_key, version, correlation_id, self.client_id, body)
        entry = InFlight(api_key, version, correlation_id)
        try:
            assert self._sock is not None
            self._sock.sendall(frame)
        except OSError as exc:
            self.close()
            raise ConnectionError_(f"send to {self.host}:{self.port} failed: {exc}") from exc
        if expect_response:
            self._in_flight.append(entry)
        else:
            entry.done = True
        return entry

    def receive(self, entry: InFlight | None = None, timeout: float | None = None) -> Any:
        """Read responses in order until ``entry``'s (the oldest one when None) is in;
        returns its decoded body."""
        if entry is None:
            if not self._in_flight:
                raise ValueError("nothing in flight")
            entry = self._in_flight[0]
        deadline = time.monotonic() + (self.request_timeout if timeout is None else timeout)
        while not entry.done:
            if not self._in_flight:
                raise ConnectionError_("connection was reset before the response arrived")
            frame = self._read_frame(deadline)
            head = self._in_flight.popleft()
            try:
                correlation_id, body = decode_response(head.api_key, head.version, frame)
            except ProtocolError as exc:
                self.close()
                raise ConnectionError_(f"undecodable response: {exc}") from exc
            if correlation_id != head.correlation_id:
                self.close()
                raise ConnectionError_(
                    f"correlation id {correlation_id}, expected {head.correlation_id}"
                )
            head.response = body
            head.done = True
        return entry.response

    def _read_frame(self, deadline: float) -> memoryview:
        size = _SIZE.unpack(self._read_exactly(4, deadline))[0]
        if size < 0 or size > MAX_FRAME_SIZE:
            self.close()
            raise ConnectionError_(f"response frame size {size} is impossible")
        return memoryview(self._read_exactly(size, deadline))

    def _read_exactly(self, n: int, deadline: float) -> bytearray:
        sock = self._sock
        if sock is None:
            raise ConnectionError_("not connected")
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        try:
            while got < n:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError()
                sock.settimeout(remaining)
                k = sock.recv_into(view[got:], n - got)
                if k == 0:
                    raise ConnectionError_(f"{self.host}:{self.port} closed the connection")
                got += k
        except TimeoutError as exc:
            self.close()
            raise ConnectionError_(
                f"no response from {self.host}:{self.port} in time", ErrorCode.REQUEST_TIMED_OUT
            ) from exc
        except ConnectionError_:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise ConnectionError_(f"receive from {self.host}:{self.port} failed: {exc}") from exc
        return out

    # ------------------------------------------------------------ one at a time

    def request(
        self, api_key: int, body: Any, *, version: int | None = None, timeout: float | None = None
    ) -> Any:
        """Send one request and wait for its response (thread-safe)."""
        with self._lock:
            if self._sock is None:
                self.connect()
            entry = self.send(api_key, body, version=version)
            return self.receive(entry, timeout)

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_hostport(address: str, default_port: int = 9092) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, or a bare host) to a (host, port) pair."""
    address = address.strip()
    if address.startswith("["):
        host, _, rest = address[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, default_port
    return host, int(port)


def parse_bootstrap(servers: str | list[str] | tuple[str, ...]) -> list[tuple[str, int]]:
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    return [parse_hostport(s) for s in items if s.strip()]
