"""Builders for log tests: batches in, records out, over real files."""

from __future__ import annotations

import os

from pykfk._core import records


def batch(count: int = 1, *, timestamp: int = 1_700_000_000_000, value: bytes = b"v",
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
          compression: int = 0) -> bytearray:
    """A writable magic-2 batch of ``count`` records with values value+b"-<i>"."""
    recs = [(b"k%d" % i, value + b"-%d" % i, timestamp + i, []) for i in range(count)]
    return bytearray(records.build_batch(
        recs, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, compression=compression))


def region_bytes(data) -> bytes:
    """The bytes a FetchData's file region covers, read through its descriptor."""
    region = data.file_region
    assert region is not None
    return os.pread(region.fd, region.size, region.position)


def read_records(log, offset: int | None = None, max_bytes: int = 1 << 30) -> list:
    """(offset, value) of every record from ``offset`` (log start by default) to the end,
    following reads across segments as a consumer would."""
    out = []
    offset = log.log_start_offset if offset is None else offset
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes)
        if data.file_region is None:
            break
        got = [(r.offset, r.value) for r in records.iter_records(region_bytes(data))]
        got = [g for g in got if g[0] >= offset]
        assert got, f"read at {offset} returned no records"
        out.extend(got)
        offset = got[-1][0] + 1
    return out
