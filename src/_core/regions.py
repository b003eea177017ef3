"""FileRegion: record bytes that stay in a segment file until sendfile sends them.

Declared in the core, the lowest layer, because both the log (which hands regions out)
and the protocol codec (which sizes them) use it, and neither may import the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes of ``fd`` from ``position``.

    The codec only uses ``size`` (for length prefixes); the connection sends the bytes
    with sendfile. The fd stays owned by whoever created the region.
    """

    fd: int
    position: int
    size: int
