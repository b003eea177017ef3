"""Request frames cut in one compiled call per read (``pykfk._core.wire.cut_frames``):
its boundaries, and the connection's use of it over a real socket (frames split across
reads, a refused size behind valid frames)."""

from __future__ import annotations

import socket
import struct

import pytest

from pykfk._core.wire import cut_frames

from .test_handlers import METADATA, create_topic
from .test_wire_path import PRODUCE, TOPIC, _batch, _frame, _produce_body


def _framed(*bodies: bytes) -> bytearray:
    return bytearray(b"".join(struct.pack(">i", len(b)) + b for b in bodies))


def test_complete_frames_are_cut_and_the_rest_left():
    buf = _framed(b"abc", b"", b"defg") + struct.pack(">i", 9) + b"part"
    bodies, rest = cut_frames(buf, 0, len(buf), 100)
    assert bodies == [b"abc", b"", b"defg"] and all(type(b) is bytearray for b in bodies)
    assert rest == len(buf) - 8
    assert cut_frames(buf, rest, len(buf), 100) == ([], rest)
    assert cut_frames(buf, 0, 3, 100) == ([], 0)  # not even a size prefix
    # a range inside the buffer: only its frames
    assert cut_frames(memoryview(buf), 7, 15, 100) == ([b""], 11)


def test_sizes_out_of_bounds_stop_the_cut_before_them():
    buf = _framed(b"ok", b"x" * 50) + struct.pack(">i", -1) + b"zzzz"
    assert cut_frames(buf, 0, len(buf), 49) == ([b"ok"], 6)  # 50 > limit
    bodies, rest = cut_frames(buf, 0, len(buf), 50)
    assert bodies == [b"ok", b"x" * 50] and buf[rest:rest + 4] == struct.pack(">i", -1)
    with pytest.raises(ValueError):
        cut_frames(buf, 0, len(buf) + 1, 50)
    with pytest.raises(ValueError):
        cut_frames(buf, 5, 4, 50)


def test_frames_split_across_reads_are_answered_in_order(raw):
    assert create_topic(raw, TOPIC)[0] == 0
    frames = b"".join(_frame(PRODUCE, 7, 300 + i, _produce_body(_batch(1))) for i in range(20))
    raw.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    # cut mid size prefix and mid body, so reads end inside frames
    for piece in (frames[:5], frames[5:400], frames[400:]):
        raw.sock.sendall(piece)
    answers = [raw.recv(PRODUCE, 7) for _ in range(20)]
    assert [c for c, _ in answers] == list(range(300, 320))
    assert [r.responses[0].partition_responses[0].base_offset for _, r in answers] == list(range(20))


def test_a_refused_size_behind_valid_frames_closes_the_connection_only(raw):
    metadata = _frame(METADATA, 1, 7, {"topics": []})
    raw.sock.sendall(metadata + metadata + struct.pack(">i", -5) + b"junk")
    raw.sock.settimeout(10)
    received = b""
    while chunk := raw.sock.recv(65536):  # answers of the frames before it, if sent, then the close
        received += chunk
        assert len(received) < 1 << 20
    other = raw.connect()  # the broker serves on
    assert other.call(METADATA, 1, {"topics": []}).brokers
