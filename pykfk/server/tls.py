"""TLS for a listener's connections, over the plain TCP transport.

The event loop's own TLS transport (asyncio's ``sslproto``, uvloop's port of it) reads the
socket 64 KiB at a time and goes round the loop (a poll, callbacks) for each read; a
1 MB Produce request costs some sixteen turns, each decrypting a few records. Here the
socket is read into a 1 MiB buffer (one per listener, shared by its connections: a
read's bytes are copied into the connection's incoming BIO at once), so one turn takes
all a read returns; every record it holds is decrypted straight into the connection's
receive buffer (its ``get_buffer``),
the connection told once per filled buffer. Writes made in one turn of the loop (the
responses of one read, a Fetch answer's header and record bytes) are joined and
encrypted together at the end of that turn, going out in one socket write.

``TlsProtocol`` is the protocol of the TCP transport and acts as the transport of the
connection (``TlsTransport``): the connection is made once the handshake is done (so the
peer's certificate is known) and sees the plaintext only. A handshake that fails or
does not finish within its timeout closes the socket without the connection ever being
made; bad records, a truncated stream and any other TLS error close that connection.

Where a received MB goes (measured on a 2-core AMD EPYC, OpenSSL 3.0, 1 MiB requests):
about 0.5 ms of CPU on this side, of which AES-GCM decryption is half (the suite matters
little: TLS_AES_128_GCM_SHA256, which the server picks by default, saves about 5%), the
three user-space copies (read buffer to incoming BIO, BIO to OpenSSL's record buffer,
record buffer to the connection's) about a quarter, OpenSSL's per-record work most of
the rest. The Python loop over records is about 2% of it: a compiled loop around
SSL_read_ex measured no better than that. Kernel TLS would remove the copies and the
BIO, but needs OpenSSL to own the socket and the kernel's "tls" ULP.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

log = logging.getLogger("pykfk.server")

# Socket reads land in a buffer of this size, one per listener: a read takes what the
# socket holds, up to this.
RECV_BUFFER_SIZE = 1024 * 1024


def recv_buffer() -> memoryview:
    """The receive buffer the TLS connections of one listener (one event loop) share."""
    return memoryview(bytearray(RECV_BUFFER_SIZE))


# Plaintext written in one turn of the loop is encrypted at its end, or at once when more
# than this is waiting.
WRITE_JOIN_MAX = 256 * 1024
# The TCP transport asks the connection to stop writing above this much ciphertext held.
WRITE_BUFFER_HIGH = 1024 * 1024
# Pieces below this are joined before encryption (one record for many small answers).
SMALL_WRITE = 16 * 1024


class TlsTransport(asyncio.Transport):
    """What the connection writes to and reads through: the plaintext side."""

    def __init__(self, protocol: TlsProtocol):
        super().__init__()
        self._tls = protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._tls.extra_info(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._tls.write(data)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self._tls.write(data)

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self._tls.closing

    def close(self) -> None:
        self._tls.close()

    def abort(self) -> None:
        self._tls.abort()

    def pause_reading(self) -> None:
        self._tls.pause_reading()

    def resume_reading(self) -> None:
        self._tls.resume_reading()

    def is_reading(self) -> bool:
        return not self._tls.app_paused

    def get_write_buffer_size(self) -> int:
        return self._tls.write_buffer_size()


class TlsProtocol(asyncio.BufferedProtocol):
    """TLS server side of one TCP connection, in front of ``app`` (the connection)."""

    def __init__(self, context: ssl.SSLContext, app: asyncio.BufferedProtocol, handshake_timeout: float,
                 shared_buffer: memoryview):
        self._context = context
        self._app = app
        self._handshake_timeout = handshake_timeout
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._sslobj = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        # The C object under ssl.SSLObject: its read/write skip a Python frame per record.
        self._ssl = self._sslobj._sslobj  # type: ignore[attr-defined]
        # Shared by the connections of a listener: what a read puts there is copied into
        # this connection's incoming BIO before the read callback returns.
        self._view = shared_buffer
        self._handshaking = True
        self._timer: asyncio.TimerHandle | None = None
        self._app_made = False
        self._app_paused = False  # the connection asked for no more plaintext
        self._pending: list[bytes | bytearray | memoryview] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        self._closing = False
        self._peer_finished = False
        self._app_transport = TlsTransport(self)
        self._peer = "?"

    # -- the TCP transport's callbacks ----------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        # Room for a few encrypted chunks of record bytes beyond what the socket takes, so
        # the next chunk is read and encrypted while the socket drains the last.
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH)  # type: ignore[attr-defined]
        self._timer = self._loop.call_later(self._handshake_timeout, self._handshake_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._pending = []
        if self._app_made:
            self._app_made = False
            self._app.connection_lost(exc)
        self._transport = None

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing:
            return
        self._incoming.write(self._view[:nbytes])
        if self._handshaking:
            self._do_handshake()
        else:
            self._deliver()
            self._send_outgoing()  # post-handshake messages, alerts

    def eof_received(self) -> bool | None:
        # A peer that stops sending mid-handshake is dropped; one that stops after it
        # (with or without close_notify) has its whole records delivered, and the
        # connection hears of the end. A record it left cut off is dropped unread:
        # OpenSSL told of the end would fail the stream (an alert), and no answer could
        # be encrypted after that.
        if self._handshaking or not self._app_made:
            self.abort()
            return None
        if not self._app_paused:
            self._deliver()
        self._peer_done()
        # The socket stays open for the answers still owed; the connection closes it
        # once they are sent.
        return True

    def _peer_done(self) -> None:
        """The peer sends no more (close_notify or end of stream): the connection answers
        what it has read, then closes."""
        if not self._peer_finished and self._app_made and not self._closing:
            self._peer_finished = True
            self._app.eof_received()

    def pause_writing(self) -> None:
        if self._app_made:
            self._app.pause_writing()

    def resume_writing(self) -> None:
        if self._app_made:
            self._app.resume_writing()

    # -- handshake -------------------------------------------------------------------

    def _do_handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            self._send_outgoing()
            return
        except (ssl.SSLError, OSError, ValueError) as exc:
            self._send_outgoing()  # the alert, if any
            log.info("closing connection from %s: TLS handshake failed: %s", self._peer, exc)
            self.abort()
            return
        self._handshaking = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._send_outgoing()
        self._app_made = True
        self._app.connection_made(self._app_transport)
        if not self._closing:
            self._deliver()  # application data that came with the handshake's last flight
            self._send_outgoing()

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if self._handshaking:
            log.info("closing connection from %s: no TLS handshake within %.1f s", self._peer, self._handshake_timeout)
            self.abort()

    # -- plaintext in ----------------------------------------------------------------

    def _deliver(self) -> None:
        """Decrypt the records received so far into the connection's buffers."""
        app = self._app
        read = self._ssl.read
        while not self._app_paused and not self._closing and self._app_made and not self._peer_finished:
            buf = memoryview(app.get_buffer(-1))
            room = len(buf)
            got = 0
            try:
                while got < room:
                    count = read(room - got, buf[got:] if got else buf)
                    if not count:  # close_notify: the peer sends no more
                        if got:
                            app.buffer_updated(got)
                        self._peer_done()
                        return
                    got += count
            except ssl.SSLWantReadError:
                if got:
                    app.buffer_updated(got)
                return
            except (ssl.SSLError, OSError, ValueError) as exc:
                # A record that fails its check (altered, out of order, not TLS): the
                # alert OpenSSL wrote goes out, the connection ends unanswered.
                log.info("closing connection from %s: TLS error: %s", self._peer, exc)
                self._send_outgoing()
                self.abort()
                return
            app.buffer_updated(got)

    def pause_reading(self) -> None:
        if self._app_paused:
            return
        self._app_paused = True
        if self._transport is not None:
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if not self._app_paused:
            return
        self._app_paused = False
        if self._transport is not None and not self._closing:
            self._transport.resume_reading()
            # Records decrypted nothing while paused: deliver those already here.
            self._loop.call_soon(self._deliver_held)

    def _deliver_held(self) -> None:
        if not self._closing and not self._handshaking:
            self._deliver()
            self._send_outgoing()

    @property
    def app_paused(self) -> bool:
        return self._app_paused

    # -- plaintext out ---------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not len(data):
            return
        if type(data) is not bytes:
            data = bytes(data)  # the caller may reuse its buffer before the flush
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= WRITE_JOIN_MAX:
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending = self._pending
        if not pending or self._transport is None:
            return
        self._pending = []
        self._pending_bytes = 0
        write = self._ssl.write
        try:
            if len(pending) == 1:
                write(pending[0])
            else:
                # Small pieces (response headers) are joined; a large one (record bytes)
                # is encrypted where it is rather than copied into the join first.
                small: list[bytes | bytearray | memoryview] = []
                for piece in pending:
                    if len(piece) < SMALL_WRITE:
                        small.append(piece)
                        continue
                    if small:
                        write(b"".join(small))
                        small = []
                    write(piece)
                if small:
                    write(b"".join(small))
        except (ssl.SSLError, OSError, ValueError) as exc:
            log.info("closing connection from %s: TLS error: %s", self._peer, exc)
            self.abort()
            return
        self._send_outgoing()

    def _send_outgoing(self) -> None:
        if self._outgoing.pending and self._transport is not None:
            self._transport.write(self._outgoing.read())

    def write_buffer_size(self) -> int:
        size = self._pending_bytes + self._outgoing.pending
        if self._transport is not None:
            size += self._transport.get_write_buffer_size()
        return size

    # -- closing ---------------------------------------------------------------------

    @property
    def closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is written, then close_notify, then close the socket."""
        if self._closing:
            return
        self._flush()
        self._closing = True
        if self._transport is None:
            return
        if not self._handshaking:
            try:
                self._ssl.shutdown()
            except (ssl.SSLError, OSError, ValueError):
                pass  # waits for the peer's close_notify, which nobody waits for
            self._send_outgoing()
        self._transport.close()

    def abort(self) -> None:
        self._closing = True
        self._pending = []
        if self._transport is not None:
            self._transport.abort()

    def extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._sslobj
        if name == "peercert":
            return self._sslobj.getpeercert()
        if name == "cipher":
            return self._sslobj.cipher()
        if name == "compression":
            return self._sslobj.compression()
        if name == "socket":
            return None  # the socket carries ciphertext: nobody writes to it around us
        if self._transport is None:
            return default
        return self._transport.get_extra_info(name, default)
