"""pykfk._core.sendfile.sendfile: whole, partial and would-block sends on local sockets."""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time

import pytest

from pykfk._core.sendfile import sendfile


@pytest.fixture
def data_file(tmp_path):
    payload = os.urandom(4 << 20)
    path = tmp_path / "data.log"
    path.write_bytes(payload)
    fd = os.open(path, os.O_RDONLY)
    yield fd, payload
    os.close(fd)


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _drain(sock: socket.socket, n: int, out: bytearray, deadline: float) -> None:
    while len(out) < n and time.monotonic() < deadline:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        out += chunk


def test_sends_the_requested_range_and_leaves_the_file_offset_alone(data_file, pair):
    fd, payload = data_file
    a, b = pair
    os.lseek(fd, 123, os.SEEK_SET)
    assert sendfile(a.fileno(), fd, 1000, 5000) == 5000
    got = bytearray()
    _drain(b, 5000, got, time.monotonic() + 10)
    assert bytes(got) == payload[1000:6000]
    assert os.lseek(fd, 0, os.SEEK_CUR) == 123
    assert sendfile(a.fileno(), fd, 0, 0) == 0


def test_non_blocking_socket_gets_partial_sends_then_zero(data_file, pair):
    fd, payload = data_file
    a, b = pair
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
    first = sendfile(a.fileno(), fd, 0, len(payload))
    assert 0 < first < len(payload)           # the socket buffer took only part
    assert sendfile(a.fileno(), fd, first, len(payload) - first) == 0   # would block
    # an event loop's way: wait for writability, send from the advanced offset
    got = bytearray()
    reader = threading.Thread(target=_drain, args=(b, len(payload), got, time.monotonic() + 20))
    reader.start()
    sent, calls = first, 0
    deadline = time.monotonic() + 20
    while sent < len(payload) and time.monotonic() < deadline:
        select.select([], [a], [], 1.0)
        sent += sendfile(a.fileno(), fd, sent, len(payload) - sent)
        calls += 1
    reader.join(timeout=20)
    assert sent == len(payload) and calls >= 1
    assert bytes(got) == payload


def test_loopback_tcp_with_a_reader_thread(data_file):
    fd, payload = data_file
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname(), timeout=10)
    conn, _ = server.accept()
    got = bytearray()
    reader = threading.Thread(target=_drain, args=(client, len(payload), got,
                                                   time.monotonic() + 20))
    reader.start()
    try:
        # blocking socket: one call sends everything, continuing across partial sends
        assert sendfile(conn.fileno(), fd, 0, len(payload)) == len(payload)
        reader.join(timeout=20)
        assert bytes(got) == payload
    finally:
        for s in (conn, client, server):
            s.close()


def test_end_of_file_is_an_error_not_a_would_block(data_file, pair):
    fd, payload = data_file
    a, b = pair
    size = len(payload)
    assert sendfile(a.fileno(), fd, size - 100, 1000) == 100   # what there is
    assert b.recv(200) == payload[-100:]
    with pytest.raises(EOFError):
        sendfile(a.fileno(), fd, size, 10)


def test_bad_arguments(data_file, pair):
    fd, _ = data_file
    a, _ = pair
    with pytest.raises(ValueError):
        sendfile(a.fileno(), fd, -1, 10)
    with pytest.raises(ValueError):
        sendfile(a.fileno(), fd, 0, -10)
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        sendfile(a.fileno(), r, 0, 10)            # closed descriptor: EBADF
    with pytest.raises(OSError):
        sendfile(fd, fd, 0, 10)                   # a read-only file is no output


def test_sends_to_a_pipe(data_file):
    fd, payload = data_file
    r, w = os.pipe()
    try:
        assert sendfile(w, fd, 10, 1000) == 1000
        assert os.read(r, 2000) == payload[10:1010]
    finally:
        os.close(r)
        os.close(w)


class _Poker:
    """Sends SIGUSR1 to the main thread every `period` seconds (pytest-timeout owns
    SIGALRM; a targeted signal makes sure the blocked thread is the one interrupted)."""

    def __init__(self, period: float):
        self.period = period
        self.stop = threading.Event()
        self.main = threading.main_thread().ident
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.period):
            signal.pthread_kill(self.main, signal.SIGUSR1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)


def test_signal_handler_exception_interrupts_a_blocked_send(data_file, pair):
    fd, payload = data_file
    a, _ = pair                                   # nobody reads: the send blocks

    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        with _Poker(0.2), pytest.raises(Interrupted):
            sendfile(a.fileno(), fd, 0, len(payload))
    finally:
        signal.signal(signal.SIGUSR1, old)


def test_interrupted_send_is_retried_when_the_handler_returns(data_file, pair):
    fd, payload = data_file
    a, b = pair
    fired = []
    old = signal.signal(signal.SIGUSR1, lambda *_: fired.append(1))
    got = bytearray()

    def slow_reader():
        time.sleep(0.3)                           # let the send block and be interrupted
        _drain(b, len(payload), got, time.monotonic() + 20)

    reader = threading.Thread(target=slow_reader)
    try:
        with _Poker(0.05):
            reader.start()
            assert sendfile(a.fileno(), fd, 0, len(payload)) == len(payload)
    finally:
        signal.signal(signal.SIGUSR1, old)
        reader.join(timeout=20)
    assert fired and bytes(got) == payload
