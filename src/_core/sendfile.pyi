"""Zero-copy file-to-socket transfer with sendfile(2) (Linux), and gathering small
responses into one buffer."""

from typing import Any

def sendfile(out_fd: int, in_fd: int, offset: int, count: int) -> int:
    """Sends count bytes of in_fd from offset to out_fd; returns the bytes sent.

    Partial sends are continued until count or until out_fd would block: on a
    non-blocking socket the result may be less than count (0 when nothing went out), and
    the caller waits for writability and calls again from offset + result. EINTR is
    retried after the Python signal handlers ran (an exception they raise propagates).
    EOFError when in_fd ends before offset + count with nothing sent; OSError for other
    failures (after a partial send the count is returned and the next call raises).
    ValueError for a negative offset or count. The file offset of in_fd is not used or
    changed; the GIL is released around the system calls.
    """

def gather(chunks: list[Any], max_bytes: int) -> bytearray | None:
    """The chunks of a response (bytes-like buffers and FileRegions) in one bytearray,
    the regions' bytes read with pread; None when there is no FileRegion among them or
    they hold more than ``max_bytes``. EOFError when a region's file ends inside it;
    OSError for other read failures."""
