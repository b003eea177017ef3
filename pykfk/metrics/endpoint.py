"""The Prometheus endpoint: ``GET /metrics`` over HTTP/1.1 on the ``metrics.listener``
address, served on the broker's event loop.

On the loop, because the collector reads loop-affine broker state (partitions, groups,
connections) that a server thread could see half-changed. One scrape is one request on
one connection, closed after the answer; a request line and headers larger than
``MAX_REQUEST_BYTES``, or slower than ``READ_TIMEOUT_S``, close the connection unanswered,
so an idle or hostile client holds nothing for long. The text format is prometheus_client's,
OpenMetrics when the scraper asks for it.
"""

from __future__ import annotations

import asyncio
import logging
import urllib.parse
from collections.abc import Awaitable, Callable

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

log = logging.getLogger("pykfk.metrics")

# A scrape's request line and headers (Prometheus sends a few hundred bytes).
MAX_REQUEST_BYTES = 16 * 1024
# Prometheus' own scrape timeout defaults to 10 s: a slower client is not one.
READ_TIMEOUT_S = 10.0
METRICS_PATH = "/metrics"


class MetricsEndpoint:
    """Serves ``registry`` on host:port. ``await start()`` (returns the bound address;
    port 0 picks a free one), ``await stop()``. ``before_scrape`` is awaited before each
    collection (what the collectors can only learn by awaiting). Loop-affine."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int, *,
                 before_scrape: Callable[[], Awaitable[None]] | None = None):
        self.registry = registry
        self.host = host
        self.port = port
        self.before_scrape = before_scrape
        self._server: asyncio.base_events.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve_client, self.host, self.port,
                                                  reuse_address=True, limit=MAX_REQUEST_BYTES)
        bound = self._server.sockets[0].getsockname()
        self.host, self.port = bound[0], bound[1]
        return self.host, self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._clients):
                task.cancel()
            await asyncio.gather(*self._clients, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _serve_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            answer = self._check(head)
            if answer is None:
                if self.before_scrape is not None:
                    await self.before_scrape()
                answer = self._metrics(head)
            writer.write(answer)
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
            pass  # the client went away, sent too much or took too long: nothing to answer
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
            if task is not None:
                self._clients.discard(task)

    @staticmethod
    def _check(head: bytes) -> bytes | None:
        """The error answer to a request that is not a scrape, else None."""
        parts = head.split(b"\r\n", 1)[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
            return _response(400, "text/plain", b"bad request\n")
        path = urllib.parse.urlsplit(parts[1].decode("latin-1")).path
        if path not in (METRICS_PATH, "/"):
            return _response(404, "text/plain", b"not found: the metrics are at /metrics\n")
        if parts[0] not in (b"GET", b"HEAD"):
            return _response(405, "text/plain", b"only GET and HEAD\n")
        return None

    def _metrics(self, head: bytes) -> bytes:
        accept = ""
        for line in head.decode("latin-1").split("\r\n")[1:]:
            name, sep, value = line.partition(":")
            if sep and name.strip().lower() == "accept":
                accept = value.strip()
        encode, content_type = choose_encoder(accept)
        body = encode(self.registry)
        return _response(200, content_type, b"" if head.startswith(b"HEAD ") else body, len(body))


_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _response(status: int, content_type: str, body: bytes, length: int | None = None) -> bytes:
    head = (f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\nConnection: close\r\n\r\n")
    return head.encode("latin-1") + body
