"""Which old segments retention may delete (apache/kafka ``UnifiedLog.deleteOldSegments``).

Pure decisions over segment facts, no I/O, so the rules are testable on their own. Three
rules, each deleting a prefix of the segment list, applied together:

- retention.ms: the segment's largest timestamp is older than now - retention.ms (the
  file's modification time when the segment holds no timestamp);
- retention.bytes: deleting the segment still leaves the log at least retention.bytes;
- log start offset: every offset of the segment is below the log start offset.

The active (last) segment is never deleted, nor a segment holding offsets at or above the
high watermark (consumers and followers may still need them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from pykfk.log.config import LogConfig


class SegmentFacts(Protocol):
    @property
    def base_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...


SegmentT = TypeVar("SegmentT", bound=SegmentFacts)

def deletable_segments(
    segments: Sequence[SegmentT],
    config: LogConfig,
    *,
    now_ms: int,
    high_watermark: int,
    log_start_offset: int,
    mtime_ms: Callable[[SegmentT], int] | None = None,
) -> tuple[int, str]:
    """How many segments from the oldest may go, and the rule that asked for the most
    (``"retention.ms"``, ``"retention.bytes"``, ``"log start offset"`` or ``""``)."""
    # Segment i ends where segment i+1 begins; only segments wholly below the high
    # watermark, and never the last one, are candidates.
    limit = 0
    while limit < len(segments) - 1 and segments[limit + 1].base_offset <= high_watermark:
        limit += 1
    if limit == 0:
        return 0, ""

    counts = []
    if config.deletes_segments and config.retention_ms >= 0:
        oldest_allowed = now_ms - config.retention_ms
        n = 0
        while n < limit and _largest_timestamp(segments[n], mtime_ms) < oldest_allowed:
            n += 1
        counts.append((n, "retention.ms"))
    if config.deletes_segments and config.retention_bytes >= 0:
        excess = sum(s.size for s in segments) - config.retention_bytes
        n = 0
        while n < limit and excess - segments[n].size >= 0:
            excess -= segments[n].size
            n += 1
        counts.append((n, "retention.bytes"))
    n = 0
    while n < limit and segments[n + 1].base_offset <= log_start_offset:
        n += 1
    counts.append((n, "log start offset"))

    count, reason = max(counts, key=lambda c: c[0])
    return (count, reason) if count else (0, "")


def _largest_timestamp(segment: SegmentT, mtime_ms: Callable[[SegmentT], int] | None) -> int:
    if segment.max_timestamp >= 0 or mtime_ms is None:
        return segment.max_timestamp
    return mtime_ms(segment)
