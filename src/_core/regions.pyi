"""FileRegion: record bytes that stay in a segment file until sendfile sends them."""

from typing import Protocol

class PinnableFile(Protocol):
    """A file whose descriptor may be closed between uses (a sealed segment): ``pin()``
    returns a descriptor that stays open until the matching ``unpin()``."""

    def pin(self) -> int: ...
    def unpin(self) -> None: ...

class FileRegion:
    """``size`` bytes of ``fd`` from ``position``; immutable. With a ``source``, ``fd``
    is only valid at once: a reader that keeps the region across an await pins it."""

    @property
    def fd(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def source(self) -> PinnableFile | None: ...
    def __init__(self, fd: int, position: int, size: int, source: PinnableFile | None = None) -> None: ...
    def pinned(self) -> FileRegion:
        """This region on a descriptor kept open until ``release()``."""
    def release(self) -> None:
        """Ends a ``pinned()`` region's hold on its descriptor."""
    def read(self) -> bytes:
        """The region's bytes (for the few readers that need them in memory)."""
