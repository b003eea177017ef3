"""What one mirror process copied: counted by its loop, read by its report line and by
the metrics endpoint (metrics.py) at scrape time."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MirrorStats"]


@dataclass
class MirrorStats:
    records: int = 0
    bytes: int = 0
    skipped_cycles: int = 0
    progress_writes: int = 0
    checkpoints: int = 0
    # source topic -> [records, bytes] copied; replaced, never resized in place, so the
    # metrics thread can iterate a reference it took
    by_topic: dict[str, list[int]] = field(default_factory=dict)
