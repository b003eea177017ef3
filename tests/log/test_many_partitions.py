"""A broker's logs at many partitions: appends to every partition's active segment, with
readers on every partition in between, set up nothing again (no index file opened or
mapped) and keep only the pages their index entries use in the page cache.

What is watched is the kernel's own view: inotify reports every open of a file in the
partition directories, /proc/self/maps lists the mappings, mincore(2) says which pages of
an index file are in the page cache."""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import threading
from collections.abc import Iterator

import pytest

from pykfk._core.segment import open_sealed_segments_limit, set_open_sealed_segments_limit
from pykfk.log import Log, LogConfig

from .helpers import batch, read_records

PARTITIONS = 100
# Sealed segments whose .log stays open: far fewer than the partitions read, so the
# readers keep the open-file LRU evicting and reopening.
OPEN_SEALED_LIMIT = 8
# A 4 KiB page holds 512 .index or 341 .timeindex entries: a few appends use one page.
PAGES_PER_INDEX_MAX = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
IN_OPEN = 0x20
IN_CREATE = 0x100
MAP_FAILED = ctypes.c_void_p(-1).value


def resident_pages(path: str) -> int:
    """Pages of the file in the page cache (mincore over a mapping that touches none)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, MAP_FAILED):
            raise OSError(ctypes.get_errno(), "mmap")
    finally:
        os.close(fd)
    try:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        if _libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(v & 1 for v in vec)
    finally:
        _libc.munmap(addr, size)


class FileOpens:
    """Names of the files opened (or, with IN_CREATE, created) in some directories from
    now on (inotify)."""

    def __init__(self, directories: list[str], events: int = IN_OPEN):
        self.fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.dirs = {}
        for d in directories:
            wd = _libc.inotify_add_watch(self.fd, d.encode(), events)
            if wd < 0:
                raise OSError(ctypes.get_errno(), f"inotify_add_watch {d}")
            self.dirs[wd] = d

    def opened(self) -> list[str]:
        names = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return names
            pos = 0
            while pos < len(data):
                wd, _mask, _cookie, length = struct.unpack_from("iIII", data, pos)
                name = data[pos + 16:pos + 16 + length].rstrip(b"\0").decode()
                names.append(os.path.join(self.dirs[wd], name))
                pos += 16 + length

    def close(self) -> None:
        os.close(self.fd)


def index_mappings() -> list[str]:
    """This process's mappings of index files, as /proc/self/maps lists them."""
    with open("/proc/self/maps", encoding="utf-8") as f:
        return sorted(line for line in f if line.rstrip().endswith((".index", ".timeindex")))


def active_index_files(log: Log) -> list[str]:
    seg = log.segments[-1]
    return [seg.index_path, seg.timeindex_path]


@pytest.fixture
def logs(tmp_path) -> Iterator[list[Log]]:
    saved = open_sealed_segments_limit()
    set_open_sealed_segments_limit(OPEN_SEALED_LIMIT)
    # The default index sizes: segment.index.bytes 10 MiB, an entry every 4 KiB.
    made = [Log(str(tmp_path / f"t-{p}"), LogConfig()) for p in range(PARTITIONS)]
    yield made
    for log in made:
        log.close()
    set_open_sealed_segments_limit(saved)


def append_round(logs: list[Log], batches: int) -> None:
    for _ in range(batches):
        for log in logs:
            log.append(batch(8, value=b"v" * 120))   # about 1.1 KiB


def test_appends_after_readers_touched_every_partition_open_and_map_nothing(logs):
    # Every fourth log rolls, so readers also go through sealed segments; then enough
    # appends for index entries in every active segment.
    append_round(logs, 16)
    for log in logs[::4]:
        log.roll()
    append_round(logs, 8)
    assert all(log.segments[-1].index_entries > 0 for log in logs)
    assert sum(len(log.segments) == 2 for log in logs) == PARTITIONS // 4
    indexes = [path for log in logs for path in active_index_files(log)]
    pages = max(resident_pages(path) for path in indexes)
    assert pages <= PAGES_PER_INDEX_MAX, (
        f"an active segment's index with a few entries holds {pages} pages of page cache"
        " (the kernel read ahead into the sparse part of its mapping)")

    # A consumer reads every partition from the start, through sealed segments too.
    for log in logs:
        assert len(read_records(log, 0)) == log.log_end_offset
    watch = FileOpens(sorted({os.path.dirname(path) for path in indexes}))
    mapped = index_mappings()
    try:
        append_round(logs, 8)
        opened = watch.opened()
    finally:
        watch.close()

    assert all(log.segments[-1].index_entries >= 2 for log in logs)
    assert not opened, f"appends opened {len(opened)} files, e.g. {opened[:4]}"
    assert index_mappings() == mapped
    pages = max(resident_pages(path) for path in active_index_files(logs[1]))
    assert pages <= PAGES_PER_INDEX_MAX


class WorkerScheduler:
    """Keeps scheduled work for one worker thread to run, as the LogManager's executor."""

    def __init__(self):
        self.work = []

    def schedule(self, delay_ms, fn):
        self.work.append(fn)

    def run_all(self):
        worker = threading.Thread(target=lambda: [fn() for fn in self.work])
        worker.start()
        worker.join(30)
        self.work.clear()


def test_a_new_segments_index_files_are_made_and_mapped_in_the_background_not_by_an_append(tmp_path):
    scheduler = WorkerScheduler()
    logs = [Log(str(tmp_path / f"t-{p}"), LogConfig(), scheduler=scheduler) for p in range(20)]
    scheduler.run_all()
    indexes = [path for log in logs for path in active_index_files(log)]
    assert all(os.path.exists(path) for path in indexes)
    assert all(log.segments[-1].index_entries == 0 for log in logs)
    mapped = index_mappings()
    assert len(mapped) == len(indexes), "the worker maps every active segment's two indexes"
    watch = FileOpens(sorted({os.path.dirname(path) for path in indexes}), IN_OPEN | IN_CREATE)
    try:
        append_round(logs, 8)       # each active segment's first index entries
        touched = watch.opened()
    finally:
        watch.close()
    assert all(log.segments[-1].index_entries > 0 for log in logs)
    assert all(log.segments[-1].timeindex_entries > 0 for log in logs)
    assert not touched, f"the first index entries opened or created {touched[:4]}"
    assert index_mappings() == mapped, "the first index entries mapped files again"
    for log in logs:
        log.close()
    # Closed, the indexes are trimmed to their entries as before.
    assert all(os.path.getsize(path) in (log.segments[-1].index_entries * 8,
                                         log.segments[-1].timeindex_entries * 12)
               for log in logs for path in active_index_files(log))
