# cython: language_level=3
"""Zero-copy file-to-socket transfer with sendfile(2): the record bytes of Fetch responses
go from the page cache to the socket without passing through Python. Small responses are
gathered into one buffer instead (``gather``): there one send costs less than a sendfile
per partition.

One call sends as much as the socket takes: partial sends are continued, EINTR is
retried (after running Python signal handlers), and a socket that would block ends
the call with the count sent so far, so a non-blocking event loop can wait for
writability and call again from the advanced offset.
"""
from libc.errno cimport errno, EINTR, EAGAIN
from libc.stdint cimport int64_t
from posix.types cimport off_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.exc cimport PyErr_CheckSignals
from libc.string cimport memcpy
from posix.unistd cimport pread

import os

from pykfk._core.regions import FileRegion

cdef extern from "<errno.h>":
    int EWOULDBLOCK

cdef extern from "<sys/sendfile.h>" nogil:
    ssize_t c_sendfile "sendfile" (int out_fd, int in_fd, off_t *offset, size_t count)

# Linux transfers at most 0x7ffff000 bytes per sendfile call (MAX_RW_COUNT).
cdef size_t MAX_CHUNK = 0x7ffff000


def sendfile(int out_fd, int in_fd, int64_t offset, int64_t count) -> int:
    """Sends count bytes of in_fd starting at offset to out_fd; returns the bytes sent.

    Returns fewer than count only when out_fd would block (0 when nothing went out).
    Raises EOFError when in_fd ends before offset + count and nothing was sent (a file
    truncated under a pending send must not look like a socket that would block), and
    OSError for other failures; when part was sent before a failure the part is
    returned and the next call reports the failure. An exception raised by a Python
    signal handler while the send waits propagates (as in socket.sendall). The file
    offset of in_fd is not used or changed. The GIL is released around the system calls.
    """
    cdef off_t off = <off_t>offset
    cdef int64_t sent = 0
    cdef ssize_t n
    cdef size_t chunk
    cdef int err
    if offset < 0 or count < 0:
        raise ValueError(f"offset and count must be >= 0, got {offset}, {count}")
    while sent < count:
        err = 0
        with nogil:
            while sent < count:
                chunk = <size_t>(count - sent) if <size_t>(count - sent) < MAX_CHUNK else MAX_CHUNK
                n = c_sendfile(out_fd, in_fd, &off, chunk)
                if n > 0:
                    sent += n
                    if <size_t>n < chunk:
                        # Short send: the socket is full (EAGAIN comes next) or a signal
                        # interrupted a blocking send after some bytes, which returns the
                        # count, not EINTR. Either way run the Python handlers first.
                        err = EINTR
                        break
                elif n == 0:
                    err = -1          # end of in_fd
                    break
                else:
                    err = errno
                    break
        if err == 0:
            break
        if err == EINTR:
            PyErr_CheckSignals()      # a handler may raise (KeyboardInterrupt); else retry
            continue
        if err == EAGAIN or err == EWOULDBLOCK or sent:
            break
        if err == -1:
            raise EOFError(f"file descriptor {in_fd} ends before offset {offset + count}")
        raise OSError(err, os.strerror(err))
    return sent


# -- small answers: one buffer ---------------------------------------------------------


def gather(list chunks, Py_ssize_t max_bytes):
    """The chunks of a response (bytes-like buffers and FileRegions) copied into one
    bytearray, the regions' bytes read with pread; None when the chunks hold no
    FileRegion or more than ``max_bytes`` in all. A region its file ends inside raises
    EOFError, as ``sendfile`` does (a file cut under a pending answer is no short send);
    other read failures raise OSError."""
    cdef Py_ssize_t total = 0
    cdef Py_ssize_t regions = 0
    cdef Py_ssize_t size, position, done
    cdef ssize_t got
    cdef int fd
    cdef char* out
    cdef Py_buffer view
    for chunk in chunks:
        if type(chunk) is FileRegion:
            total += <Py_ssize_t>chunk.size
            regions += 1
        else:
            PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
            total += view.len
            PyBuffer_Release(&view)
        if total > max_bytes:
            return None
    if regions == 0:
        return None
    result = PyByteArray_FromStringAndSize(NULL, total)
    out = PyByteArray_AS_STRING(result)
    done = 0
    for chunk in chunks:
        if type(chunk) is FileRegion:
            fd = chunk.fd
            position = chunk.position
            size = chunk.size
            while size > 0:
                got = pread(fd, out + done, <size_t>size, <off_t>position)
                if got > 0:
                    done += got
                    position += got
                    size -= got
                elif got == 0:
                    raise EOFError(f"file descriptor {fd} ends before offset {position + size}")
                elif errno == EINTR:
                    PyErr_CheckSignals()
                else:
                    raise OSError(errno, os.strerror(errno))
        else:
            PyObject_GetBuffer(chunk, &view, PyBUF_SIMPLE)
            memcpy(out + done, view.buf, <size_t>view.len)
            done += view.len
            PyBuffer_Release(&view)
    return result
