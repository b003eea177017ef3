# cython: language_level=3
"""FileRegion: record bytes that stay in a segment file until sendfile sends them.

Declared in the core, the lowest layer, because both the log (which hands regions out)
and the protocol codec (which sizes them) use it, and neither may import the other.
Compiled: a Fetch makes two per partition it answers (the read and its pinned copy),
and a Python class's ``__init__`` cost more than the rest of answering that partition.
"""

import os


cdef class FileRegion:
    """``size`` bytes of ``fd`` from ``position``; immutable.

    The codec only uses ``size`` (for length prefixes); the connection sends the bytes
    with sendfile. With a ``source`` (a PinnableFile: ``pin()`` returns a descriptor kept
    open until the matching ``unpin()``), ``fd`` is only valid at once (the source may
    close it later): a reader that keeps the region across an await pins it (``pinned``).
    """

    cdef readonly int fd
    cdef readonly long long position
    cdef readonly long long size
    cdef readonly object source

    def __init__(self, int fd, long long position, long long size, source=None):
        self.fd = fd
        self.position = position
        self.size = size
        self.source = source

    def __eq__(self, other):
        if type(other) is not FileRegion:
            return NotImplemented
        cdef FileRegion that = <FileRegion>other
        return (self.fd == that.fd and self.position == that.position and self.size == that.size
                and self.source == that.source)

    def __hash__(self):
        return hash((self.fd, self.position, self.size, id(self.source)))

    def __repr__(self):
        return f"FileRegion(fd={self.fd}, position={self.position}, size={self.size}, source={self.source!r})"

    def __reduce__(self):
        return (FileRegion, (self.fd, self.position, self.size, self.source))

    def pinned(self):
        """This region on a descriptor kept open until ``release()``."""
        if self.source is None:
            return self
        return FileRegion(self.source.pin(), self.position, self.size, self.source)

    def release(self):
        """Ends a ``pinned()`` region's hold on its descriptor."""
        if self.source is not None:
            self.source.unpin()

    def read(self):
        """The region's bytes (for the few readers that need them in memory)."""
        region = self.pinned()
        try:
            return os.pread(region.fd, region.size, region.position)
        finally:
            region.release()
