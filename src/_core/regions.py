"""FileRegion: record bytes that stay in a segment file until sendfile sends them.

Declared in the core, the lowest layer, because both the log (which hands regions out)
and the protocol codec (which sizes them) use it, and neither may import the other.
"""

from __future__ import annotations

import os
from typing import Protocol


class PinnableFile(Protocol):
    """A file whose descriptor may be closed between uses (a sealed segment): ``pin()``
    returns a descriptor that stays open until the matching ``unpin()``."""

    def pin(self) -> int: ...
    def unpin(self) -> None: ...


class FileRegion:
    """``size`` bytes of ``fd`` from ``position``.

    The codec only uses ``size`` (for length prefixes); the connection sends the bytes
    with sendfile. With a ``source``, ``fd`` is only valid at once (the source may close
    it later): a reader that keeps the region across an await pins it (``pinned``).
    Treated as immutable. A plain class with slots, not a frozen dataclass: a Fetch
    makes two per partition it answers, and a frozen dataclass's ``__init__`` costs
    several times more.
    """

    __slots__ = ("fd", "position", "size", "source")

    def __init__(self, fd: int, position: int, size: int, source: PinnableFile | None = None):
        self.fd = fd
        self.position = position
        self.size = size
        self.source = source

    def __eq__(self, other: object) -> bool:
        if type(other) is not FileRegion:
            return NotImplemented
        return (self.fd, self.position, self.size, self.source) == (other.fd, other.position, other.size, other.source)

    def __hash__(self) -> int:
        return hash((self.fd, self.position, self.size, id(self.source)))

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, size={self.size}, source={self.source!r})"

    def pinned(self) -> FileRegion:
        """This region on a descriptor kept open until ``release()``."""
        if self.source is None:
            return self
        return FileRegion(self.source.pin(), self.position, self.size, self.source)

    def release(self) -> None:
        """Ends a ``pinned()`` region's hold on its descriptor."""
        if self.source is not None:
            self.source.unpin()

    def read(self) -> bytes:
        """The region's bytes (for the few readers that need them in memory)."""
        region = self.pinned()
        try:
            return os.pread(region.fd, region.size, region.position)
        finally:
            region.release()
