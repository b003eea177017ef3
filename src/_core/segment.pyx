# cython: language_level=3
"""Log segments: a .log of magic-2 record batches with its sparse .index and .timeindex.

Mirrors apache/kafka LogSegment, OffsetIndex, TimeIndex and AbstractIndex (file formats,
the index-interval rule, the warm-tail index search). The public contract and the
behaviour on damaged files are documented in segment.pyi.

On-disk layout (all integers big-endian, Kafka's formats):

  <base>.log        record batches back to back (layout in batch.h); nothing else.
  <base>.index      8-byte entries, one per index point:
                      0  int32  relative offset = (last offset of the batch) - base_offset
                      4  int32  position of that batch in .log
                    Both fields strictly increase from entry to entry.
  <base>.timeindex  12-byte entries:
                      0  int64  largest batch max_timestamp seen up to this index point
                      8  int32  relative offset of the last offset of the first batch
                            that reached that timestamp
                    Timestamps strictly increase, relative offsets never decrease.

Nothing in the index files is checksummed: they are derived data and are rebuilt from
the .log when they look wrong. While a segment is open its index files are extended
(sparsely) to max_index_bytes, so a crash leaves zero entries behind the used ones;
close() trims them to the used size. The number of used entries is found from the data:
the last non-zero entry ends the used part. Entry 0 may legitimately be all zeros
(relative offset 0 at position 0, or timestamp 0 at relative offset 0); an all-zero
entry 0 with nothing after it is indistinguishable from an empty index, which is
harmless because lookups fall back to (base_offset, position 0) anyway.
"""
cimport cython
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.errno cimport errno, EINTR, EIO, ENOENT, ENXIO
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT32_MAX
from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcpy, strdup
from posix.types cimport off_t
from posix.unistd cimport pread, pwrite, ftruncate, fsync, lseek
from posix.unistd cimport close as c_close
from posix.mman cimport (mmap, munmap, msync, posix_madvise, PROT_READ, PROT_WRITE, MAP_SHARED,
                         MAP_FAILED, MS_SYNC,
                         POSIX_MADV_RANDOM, POSIX_MADV_SEQUENTIAL)
from posix.fcntl cimport posix_fallocate, O_CLOEXEC, O_CREAT, O_RDWR
from posix.fcntl cimport open as c_open
from posix.stat cimport fstat, struct_stat

cimport _batch
from _batch cimport pk_batch_header, pk_batch_error, pk_load_u32, pk_load_u64, pk_store_u32, pk_store_u64

import os
import time
import weakref
from collections import OrderedDict

from pykfk._core.errors import CorruptBatchError, IndexCorruptError

cdef extern from "<unistd.h>" nogil:
    # Linux/BSD extensions (_GNU_SOURCE comes with Python.h): skip the holes of a
    # sparse preallocated index when counting its used entries.
    int SEEK_DATA
    int SEEK_HOLE

cdef enum:
    INDEX_ENTRY_SIZE = 8
    TIMEINDEX_ENTRY_SIZE = 12
    # Header window of a scan. A lookup's first read is small (512 B: a random position
    # costs the copy of what is read, mostly from DRAM, so a 4 KiB read costs ~2x a
    # 512 B one); a scan that runs on past its window reads a page at a time, since
    # index points are index_interval_bytes (default 4096) apart.
    WINDOW_FIRST_BYTES = 512
    WINDOW_BYTES = 4096
    # Index entries buffered before one pwrite (a 1 MiB append at the default interval
    # yields 256 entries, so most appends write each index once).
    STAGE_ENTRIES = 1024
    # Kafka's AbstractIndex uses 8 KiB as the warm section (see _floor_slot).
    WARM_SECTION_BYTES = 8192
    # Disk blocks of an index are reserved this far ahead of its entries (one
    # posix_fallocate per 8,192 offset-index entries: ~32 MiB of log at the default
    # index interval).
    RESERVE_BYTES = 65536
    # Blocks a new segment's index gets reserved before its first entry (one page: 512
    # offset-index entries, ~2 MiB of log; 10,000 partitions reserve 80 MiB so).
    INDEX_FIRST_RESERVE_BYTES = 4096

INDEX_ENTRY_SIZE_BYTES = INDEX_ENTRY_SIZE
TIMEINDEX_ENTRY_SIZE_BYTES = TIMEINDEX_ENTRY_SIZE

# Recovery calls its progress callback (and retakes the GIL) this often.
PROGRESS_INTERVAL_BYTES = 16 * 1024 * 1024


def segment_file_name(int64_t base_offset, str suffix) -> str:
    """Kafka's file name for a segment file: 20-digit zero-padded base offset + suffix."""
    return f"{base_offset:020d}{suffix}"


# --------------------------------------------------------------------------------------
# Index files: read and written through a shared mapping, holding no file descriptor.
#
# A broker holds thousands of segments, so an index keeps no fd: the file is opened
# only to change its size (extend, reserve blocks, trim) and closed again; the mapping
# stays valid after the close (and after a rename of the file). Entries are stored into
# the mapping only after posix_fallocate has reserved the disk blocks under them, so a
# full disk is an errno from the reservation (the index freezes, see _Index.error) and
# never a SIGBUS on a store into a sparse page. A new segment's index files are created
# at their first entry (or when the segment is sealed or closed), so creating a
# partition costs one file, not three.
#
# A mapping that reaches past the used entries (an active segment's, extended to
# max_index_bytes) is advised random access: a fault in it then reads in that one page.
# With the default advice the kernel reads ahead around each fault, up to the device's
# read_ahead_kb (8 MiB on some virtual disks): the first entry of every new index pulled
# megabytes of zero pages from the holes into the page cache, and 5,000 active segments
# asked for more page cache than the machine had, so appends kept faulting those pages in
# again while the kernel reclaimed them (produce ran 10-20x slower). A mapping of just
# the used entries (a sealed segment's) keeps the default: its reads are worth reading
# ahead and it has no holes.
# --------------------------------------------------------------------------------------

cdef struct _Index:
    char *path             # NUL-terminated file path (malloc'd), opened for size changes only
    int entry_size
    uint8_t *map            # PROT_READ|PROT_WRITE shared mapping of map_bytes (NULL when 0)
    size_t map_bytes
    size_t reserved         # bytes from 0 whose disk blocks are allocated: safe to store to
    Py_ssize_t entries      # entries on file (staged ones are not counted)
    Py_ssize_t max_entries
    uint8_t *staged         # STAGE_ENTRIES entries waiting for one copy into the mapping
    Py_ssize_t staged_count
    int error               # errno of a failed reservation: the index takes no more entries
    bint preallocate
    bint exists             # the file is on disk (a new index is created at its first entry)


cdef int _pwrite_all(int fd, const uint8_t *p, size_t n, int64_t pos) noexcept nogil:
    """Writes all n bytes at pos, across partial writes. 0 or an errno."""
    cdef ssize_t w
    while n > 0:
        w = pwrite(fd, p, n, <off_t>pos)
        if w < 0:
            if errno == EINTR:
                continue
            return errno
        if w == 0:
            return EIO
        p += w
        n -= <size_t>w
        pos += w
    return 0


cdef ssize_t _pread_all(int fd, uint8_t *p, size_t n, int64_t pos) noexcept nogil:
    """Reads up to n bytes at pos (fewer only at end of file). Bytes read, or -errno."""
    cdef ssize_t r
    cdef size_t got = 0
    while got < n:
        r = pread(fd, p + got, n - got, <off_t>(pos + <int64_t>got))
        if r < 0:
            if errno == EINTR:
                continue
            return -errno
        if r == 0:
            break
        got += <size_t>r
    return <ssize_t>got


cdef int _raise_os(int err, object path=None) except -1:
    raise OSError(err, os.strerror(err), path)


cdef int64_t _file_size(int fd) except -1:
    cdef struct_stat st
    if fstat(fd, &st) != 0:
        _raise_os(errno)
        return -1
    return st.st_size


cdef inline bint _entry_is_zero(const uint8_t *e, int entry_size) noexcept nogil:
    if entry_size == INDEX_ENTRY_SIZE:
        return pk_load_u64(e) == 0
    return pk_load_u64(e) == 0 and pk_load_u32(e + 8) == 0


cdef Py_ssize_t _used_entries(const uint8_t *m, size_t map_bytes, int entry_size,
                              size_t data_end) noexcept nogil:
    """Entries up to and including the last non-zero one, searching back from data_end."""
    cdef size_t limit = map_bytes if data_end > map_bytes else data_end
    cdef Py_ssize_t i = <Py_ssize_t>(limit // <size_t>entry_size) - 1
    while i >= 0:
        if not _entry_is_zero(m + i * entry_size, entry_size):
            return i + 1
        i -= 1
    return 0


cdef size_t _data_end(int fd, size_t size) noexcept nogil:
    """End of the last data extent of a sparse file (size when holes cannot be asked)."""
    cdef off_t pos = 0, data, hole
    cdef size_t end = 0
    while <size_t>pos < size:
        data = lseek(fd, pos, SEEK_DATA)
        if data < 0:
            # ENXIO: no data after pos; anything else: no hole support, scan it all.
            return end if errno == ENXIO else size
        hole = lseek(fd, data, SEEK_HOLE)
        if hole < 0:
            return size
        end = <size_t>hole
        pos = hole
    return end if end < size else size


cdef int _index_open(_Index *ix, bint create) noexcept nogil:
    """A descriptor of the index file for one size change (the caller closes it), or
    -errno (-ENOENT when the file is not there and create is False)."""
    cdef int fd = c_open(ix.path, O_RDWR | O_CLOEXEC | (O_CREAT if create else 0), 0o644)
    if fd < 0:
        return -errno
    ix.exists = True
    return fd


cdef int _index_map(_Index *ix, int fd, size_t nbytes) noexcept nogil:
    """Maps the first nbytes of the file (which must be at least that long); 0 unmaps."""
    cdef void *m
    if ix.map != NULL:
        munmap(<void *>ix.map, ix.map_bytes)
        ix.map = NULL
        ix.map_bytes = 0
    if nbytes == 0:
        return 0
    m = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
    if m == MAP_FAILED:
        return errno
    ix.map = <uint8_t *>m
    ix.map_bytes = nbytes
    return 0


cdef inline void _index_advise_sparse(_Index *ix) noexcept nogil:
    """The mapping reaches past the used entries, into holes: no read-ahead on faults."""
    if ix.map != NULL:
        posix_madvise(<void *>ix.map, ix.map_bytes, POSIX_MADV_RANDOM)


cdef int _index_grow(_Index *ix) noexcept nogil:
    """Extends the file and the mapping to max_entries (the active-segment size)."""
    cdef size_t want = <size_t>ix.max_entries * <size_t>ix.entry_size
    cdef struct_stat st
    cdef int rc = 0, fd
    if ix.map_bytes >= want:
        return 0
    fd = _index_open(ix, True)
    if fd < 0:
        return -fd
    if fstat(fd, &st) != 0:
        rc = errno
    elif <size_t>st.st_size < want:
        if ix.preallocate:
            rc = posix_fallocate(fd, 0, <off_t>want)
            if rc == 0:
                ix.reserved = want
        elif ftruncate(fd, <off_t>want) != 0:
            rc = errno
    if rc == 0:
        rc = _index_map(ix, fd, want)
    if rc == 0:
        _index_advise_sparse(ix)
    c_close(fd)
    return rc


cdef int _index_reserve(_Index *ix, size_t end) noexcept nogil:
    """Allocates the disk blocks under [0, end) of the mapping (RESERVE_BYTES at a time),
    so storing entries there cannot fault. 0 or an errno."""
    cdef size_t target
    cdef int rc, fd
    if end <= ix.reserved:
        return 0
    target = (end + RESERVE_BYTES - 1) // RESERVE_BYTES * RESERVE_BYTES
    if target > ix.map_bytes:
        target = ix.map_bytes
    fd = _index_open(ix, False)
    if fd < 0:
        return -fd
    rc = posix_fallocate(fd, <off_t>ix.reserved, <off_t>(target - ix.reserved))
    c_close(fd)
    if rc == 0:
        ix.reserved = target
    return rc


cdef int _index_commit(_Index *ix) noexcept nogil:
    """Stores the staged entries after the committed ones. 0 or an errno (then frozen)."""
    cdef int rc
    cdef Py_ssize_t n = ix.staged_count
    cdef size_t at
    if n == 0:
        return 0
    ix.staged_count = 0
    if ix.error:
        return ix.error
    at = <size_t>ix.entries * <size_t>ix.entry_size
    rc = _index_grow(ix)
    if rc == 0:
        rc = _index_reserve(ix, at + <size_t>(n * ix.entry_size))
    if rc != 0:
        ix.error = rc
        return rc
    memcpy(ix.map + at, ix.staged, <size_t>(n * ix.entry_size))
    ix.entries += n
    return 0


cdef inline bint _index_has_room(_Index *ix) noexcept nogil:
    return ix.error == 0 and ix.entries + ix.staged_count < ix.max_entries


cdef inline uint8_t *_index_stage_slot(_Index *ix) noexcept nogil:
    """The next staging slot, committing first when staging is full (NULL on error)."""
    if ix.staged_count == STAGE_ENTRIES:
        if _index_commit(ix) != 0:
            return NULL
    return ix.staged + ix.staged_count * ix.entry_size


cdef void _index_truncate(_Index *ix, Py_ssize_t n) noexcept nogil:
    """Keeps the first n entries and zeroes the rest (a reopen counts from data)."""
    ix.staged_count = 0
    if n >= ix.entries:
        return
    memset(ix.map + <size_t>n * ix.entry_size, 0, <size_t>((ix.entries - n) * ix.entry_size))
    ix.entries = n


cdef int _index_reset(_Index *ix) noexcept nogil:
    """Drops every entry (before a rebuild); the file is re-extended on the next commit."""
    cdef int fd
    _index_map(ix, -1, 0)
    ix.entries = 0
    ix.staged_count = 0
    ix.error = 0
    ix.reserved = 0
    if not ix.exists:
        return 0
    fd = _index_open(ix, False)
    if fd < 0:
        ix.error = -fd
        return -fd
    if ftruncate(fd, 0) != 0:
        ix.error = errno
    c_close(fd)
    return ix.error


cdef int _index_trim(_Index *ix, bint keep_mapped, bint create) noexcept nogil:
    """Trims the file to its used entries (creating it when create and missing); keeps
    a mapping of just those entries when keep_mapped. 0 or an errno (ENOENT without
    create: the file was renamed for deletion, nothing to trim)."""
    cdef int rc = 0, fd
    cdef size_t used
    _index_commit(ix)
    used = <size_t>ix.entries * <size_t>ix.entry_size
    fd = _index_open(ix, create)
    if fd < 0:
        _index_map(ix, -1, 0)
        return 0 if fd == -ENOENT else -fd
    if ftruncate(fd, <off_t>used) != 0:
        rc = errno
    if keep_mapped and rc == 0:
        rc = _index_map(ix, fd, used)
    else:
        _index_map(ix, -1, 0)
    if ix.reserved > used:
        ix.reserved = used
    c_close(fd)
    return rc


cdef int _index_remap(_Index *ix) noexcept nogil:
    """Maps the used entries of a trimmed (sealed) index again after the open-file LRU
    unmapped them. 0 or an errno."""
    cdef size_t used = <size_t>ix.entries * <size_t>ix.entry_size
    cdef struct_stat st
    cdef int rc = 0, fd
    if used == 0 or ix.map != NULL:
        return 0
    fd = _index_open(ix, False)
    if fd < 0:
        return -fd
    if fstat(fd, &st) != 0:
        rc = errno
    elif <size_t>st.st_size < used:
        rc = EIO        # shorter than its entries: changed under the segment
    else:
        rc = _index_map(ix, fd, used)
    c_close(fd)
    return rc


cdef int _index_sync(_Index *ix) noexcept nogil:
    """Writes the used entries back to disk (msync). 0 or an errno."""
    cdef size_t used = <size_t>ix.entries * <size_t>ix.entry_size
    if ix.map == NULL or used == 0:
        return 0
    if msync(<void *>ix.map, used if used < ix.map_bytes else ix.map_bytes, MS_SYNC) != 0:
        return errno
    return 0


# --------------------------------------------------------------------------------------
# Index search
#
# Kafka's AbstractIndex searches the last 8 KiB of an index first ("warm entries") when
# the target is at or past that section, and this does the same, for page-cache reasons:
# every append writes the tail pages and nearly every lookup comes from consumers near
# the log end, so the tail pages stay resident. A plain binary search over the whole
# index starts in the middle and its first few probes land on pages that nothing else
# touches; when those were evicted each lookup pays a page fault (possibly a disk read).
# Keeping tail lookups inside the warm section means they touch at most those few pages.
# 8 KiB is Kafka's figure: small enough to stay cached (two or three 4 KiB pages),
# large enough to cover the consumers that lag a little behind the tail.
# --------------------------------------------------------------------------------------

cdef inline int64_t _key(const uint8_t *m, Py_ssize_t slot, int entry_size,
                         int key_pos, bint key64) noexcept nogil:
    cdef const uint8_t *e = m + slot * entry_size + key_pos
    if key64:
        return <int64_t>pk_load_u64(e)
    return <int64_t>(<int32_t>pk_load_u32(e))


cdef Py_ssize_t _floor_slot(const uint8_t *m, Py_ssize_t n, int entry_size, int key_pos,
                            bint key64, int64_t target) noexcept nogil:
    """The last slot whose key is <= target (keys ascending), -1 when there is none."""
    cdef Py_ssize_t warm = WARM_SECTION_BYTES // entry_size
    cdef Py_ssize_t first_warm, lo, hi, mid
    if n <= 0 or _key(m, 0, entry_size, key_pos, key64) > target:
        return -1
    first_warm = n - warm if n > warm else 0
    if _key(m, first_warm, entry_size, key_pos, key64) <= target:
        lo = first_warm
        hi = n - 1
    else:
        lo = 0
        hi = first_warm
    # invariant: key(lo) <= target; answer in [lo, hi]
    while lo < hi:
        mid = lo + (hi - lo + 1) // 2
        if _key(m, mid, entry_size, key_pos, key64) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


cdef object _buffer_index_lookup(object buf, int entry_size, int key_pos, bint key64,
                                 int64_t target, Py_ssize_t entries):
    cdef Py_buffer view
    cdef Py_ssize_t n, slot
    cdef const uint8_t *m
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        n = view.len // entry_size
        if entries >= 0:
            if entries > n:
                raise ValueError(f"{entries} entries do not fit in {view.len} bytes")
            n = entries
        else:
            n = _used_entries(<const uint8_t *>view.buf, <size_t>view.len, entry_size,
                              <size_t>view.len)
        m = <const uint8_t *>view.buf
        slot = _floor_slot(m, n, entry_size, key_pos, key64, target)
        if slot < 0:
            return (-1, -1)
        if entry_size == INDEX_ENTRY_SIZE:
            return (<int32_t>pk_load_u32(m + slot * 8), <int32_t>pk_load_u32(m + slot * 8 + 4))
        return (<int64_t>pk_load_u64(m + slot * 12), <int32_t>pk_load_u32(m + slot * 12 + 8))
    finally:
        PyBuffer_Release(&view)


def index_lookup(buf, int64_t target, Py_ssize_t entries=-1):
    """(relative_offset, position) of the last .index entry in buf whose relative offset is
    <= target, or (-1, -1). entries=-1 counts the used entries from the data."""
    return _buffer_index_lookup(buf, INDEX_ENTRY_SIZE, 0, False, target, entries)


def timeindex_lookup(buf, int64_t target_timestamp, Py_ssize_t entries=-1):
    """(timestamp, relative_offset) of the last .timeindex entry in buf whose timestamp is
    <= target_timestamp, or (-1, -1). entries=-1 counts the used entries from the data."""
    return _buffer_index_lookup(buf, TIMEINDEX_ENTRY_SIZE, 0, True, target_timestamp, entries)


def used_entries(buf, int entry_size) -> int:
    """Number of used entries of an index image: up to the last non-zero entry."""
    cdef Py_buffer view
    if entry_size not in (INDEX_ENTRY_SIZE, TIMEINDEX_ENTRY_SIZE):
        raise ValueError("entry_size must be 8 (.index) or 12 (.timeindex)")
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        return _used_entries(<const uint8_t *>view.buf, <size_t>view.len, entry_size,
                             <size_t>view.len)
    finally:
        PyBuffer_Release(&view)


# --------------------------------------------------------------------------------------
# Segment
# --------------------------------------------------------------------------------------

cdef class Segment
# --------------------------------------------------------------------------------------
# Open files and mappings of sealed segments
#
# Each segment's indexes are mappings without descriptors; its .log needs one. The active
# segment of every partition keeps its .log open and its two index mappings, whatever
# readers do; sealed segments (the log rolled past them) share a bounded LRU: the least
# recently used idle ones close their .log and unmap their indexes when the LRU is over
# its limit, and reopen and remap them by path at their next use. A segment pinned by a
# send in flight, or appended, flushed or recovered in another thread, is never closed
# under it. So a broker needs about one descriptor and two mappings per partition plus
# the LRU's limit of each, however many segments its logs hold (the kernel refuses a
# process more than vm.max_map_count mappings, 65,530 by default: unbounded, the index
# mappings of sealed segments reached it at some tens of thousands of segments).
# --------------------------------------------------------------------------------------

DEFAULT_OPEN_SEALED_SEGMENTS = 1024


cdef class _OpenSealedSegments:
    cdef object _order            # id(segment) -> weakref to it, least recently used first
    cdef Py_ssize_t limit

    def __cinit__(self):
        self._order = OrderedDict()
        self.limit = DEFAULT_OPEN_SEALED_SEGMENTS

    cdef int add(self, Segment seg) except -1:
        key = id(seg)
        ref = self._order.get(key)
        if ref is not None and ref() is seg:
            self._order.move_to_end(key)
            return 0
        self._order[key] = weakref.ref(seg)
        self.evict()
        return 0

    cdef int touch(self, Segment seg) except -1:
        try:
            self._order.move_to_end(id(seg))
        except KeyError:
            self.add(seg)
        return 0

    cdef int discard(self, Segment seg) except -1:
        ref = self._order.get(id(seg))
        if ref is not None and ref() is seg:
            del self._order[id(seg)]
        return 0

    cdef int evict(self) except -1:
        """Closes least recently used idle descriptors until within the limit (busy
        ones go to the back of the queue and are tried again later)."""
        cdef Py_ssize_t tries = len(self._order)
        cdef Segment seg
        while len(self._order) > self.limit and tries > 0:
            tries -= 1
            key, ref = self._order.popitem(last=False)
            obj = ref()
            if obj is None:
                continue
            seg = <Segment>obj
            if not seg._release_fd() and seg._sealed and seg._log_fd >= 0:
                self._order[key] = ref
        return 0

    def count(self) -> int:
        return sum(1 for ref in self._order.values() if ref() is not None)


cdef _OpenSealedSegments _OPEN_SEALED = _OpenSealedSegments()


def set_open_sealed_segments_limit(Py_ssize_t limit) -> None:
    """At most ``limit`` sealed segments keep their .log open and their indexes mapped
    (busy ones excepted)."""
    if limit < 1:
        raise ValueError(f"the open sealed segments limit must be >= 1, got {limit}")
    _OPEN_SEALED.limit = limit
    _OPEN_SEALED.evict()


def open_sealed_segments_limit() -> int:
    return _OPEN_SEALED.limit


def open_sealed_segments() -> int:
    """Sealed segments whose .log descriptor is open (and indexes mapped) now."""
    return _OPEN_SEALED.count()


@cython.final
cdef class Segment:
    """One segment of a partition log. See segment.pyi for the contract."""

    cdef readonly int64_t base_offset
    cdef readonly int64_t size
    cdef readonly int64_t next_offset
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t first_batch_timestamp
    cdef readonly int64_t created_monotonic_ms
    cdef readonly int64_t index_interval_bytes
    cdef readonly int64_t max_index_bytes
    cdef readonly str path
    cdef readonly str index_path
    cdef readonly str timeindex_path
    cdef readonly bint needs_recovery
    cdef readonly bint indexes_rebuilt
    cdef readonly object index_rebuild_reason

    cdef int _log_fd
    cdef _Index _oi
    cdef _Index _ti
    cdef int64_t _offset_of_max_timestamp
    cdef int64_t _time_index_last_ts     # timestamp of the last (staged or written) entry
    cdef int64_t _bytes_since_index
    cdef bint _closed
    cdef bint _rebuild_bad_indexes
    # In-flight operations that run without the GIL (see _check_idle).
    cdef int _appending
    cdef int _flushing
    cdef bint _exclusive
    # Header window: bytes [_win_pos, _win_pos + _win_len) of the .log as last read.
    # Bytes below `size` never change except by truncate_to/recover, which drop it.
    cdef uint8_t *_window
    cdef int64_t _win_pos
    cdef Py_ssize_t _win_len
    # Sealed (no longer appended to): the .log descriptor is one of the open-file LRU's
    # and may be closed between uses, reopened on demand (see _OpenSealedSegments).
    cdef bint _sealed
    # Readers holding the descriptor for a send in flight (pin/unpin): while any do, the
    # LRU leaves it open and close() leaves it to the last unpin.
    cdef int _readers
    cdef bint _close_deferred
    cdef object __weakref__

    def __cinit__(self):
        self._log_fd = -1
        self._oi.entry_size = INDEX_ENTRY_SIZE
        self._ti.entry_size = TIMEINDEX_ENTRY_SIZE
        self._closed = True
        self._win_len = 0
        self._window = <uint8_t *>malloc(WINDOW_BYTES)
        self._oi.staged = <uint8_t *>malloc(STAGE_ENTRIES * INDEX_ENTRY_SIZE)
        self._ti.staged = <uint8_t *>malloc(STAGE_ENTRIES * TIMEINDEX_ENTRY_SIZE)
        if self._window == NULL or self._oi.staged == NULL or self._ti.staged == NULL:
            raise MemoryError()

    def __init__(self, directory, int64_t base_offset, *, int64_t index_interval_bytes=4096,
                 int64_t max_index_bytes=10 * 1024 * 1024, bint preallocate=False,
                 bint rebuild_bad_indexes=True, bint new=False):
        # defaults are Kafka's index.interval.bytes and segment.index.bytes
        if not self._closed or self._log_fd >= 0:
            raise RuntimeError("Segment.__init__ called twice")
        if base_offset < 0:
            raise ValueError(f"base_offset must be >= 0, got {base_offset}")
        if index_interval_bytes < 0:
            raise ValueError(f"index_interval_bytes must be >= 0, got {index_interval_bytes}")
        if max_index_bytes < 0:
            raise ValueError(f"max_index_bytes must be >= 0, got {max_index_bytes}")
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        self._rebuild_bad_indexes = rebuild_bad_indexes
        self.created_monotonic_ms = <int64_t>(time.monotonic() * 1000)
        directory = os.fspath(directory)
        self.path = os.path.join(directory, segment_file_name(base_offset, ".log"))
        self.index_path = os.path.join(directory, segment_file_name(base_offset, ".index"))
        self.timeindex_path = os.path.join(directory, segment_file_name(base_offset, ".timeindex"))

        self._oi.path = strdup(os.fsencode(self.index_path))
        self._ti.path = strdup(os.fsencode(self.timeindex_path))
        if self._oi.path == NULL or self._ti.path == NULL:
            raise MemoryError()
        self._log_fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self.size = _file_size(self._log_fd)
            # In a directory just made there is no index to look for (two failed opens
            # per partition were a tenth of a 10,000-partition creation).
            partial_oi = self._open_index(&self._oi, self.index_path, preallocate, not new)
            partial_ti = self._open_index(&self._ti, self.timeindex_path, preallocate, not new)
            missing = [os.path.basename(path) for path, exists in
                       ((self.index_path, self._oi.exists), (self.timeindex_path, self._ti.exists))
                       if not exists]
            if missing and self.size > 0 and not rebuild_bad_indexes:
                self._abandon()   # report, and leave the directory as it was
                raise IndexCorruptError(f"{self.path}: missing " + " and ".join(missing))
            self._closed = False

            reason = None
            if missing and self.size > 0:
                reason = "missing " + " and ".join(missing)
            elif partial_oi or partial_ti:
                reason = "index file length is not a whole number of entries"
            else:
                reason = self._load_from_indexes()
            if reason is not None:
                if not rebuild_bad_indexes:
                    self._abandon()
                    raise IndexCorruptError(f"{self.path}: {reason}")
                self.index_rebuild_reason = reason
                self.rebuild_indexes()
                self.indexes_rebuilt = True
        except BaseException:
            self._abandon()   # a failed open leaves the files as they were
            raise

    cdef bint _open_index(self, _Index *ix, str path, bint preallocate, bint look) except -1:
        """Maps one index file and counts its used entries; True when its length is not a
        whole number of entries. A missing file (or any, unless ``look``) is created at
        the first entry."""
        cdef int64_t fsize
        cdef size_t usable, data_end
        cdef int rc, fd
        ix.preallocate = preallocate
        ix.max_entries = <Py_ssize_t>(self.max_index_bytes // ix.entry_size)
        fd = _index_open(ix, False) if look else -ENOENT
        if fd == -ENOENT:
            ix.exists = False
            return False
        if fd < 0:
            _raise_os(-fd, path)
        try:
            fsize = _file_size(fd)
            usable = <size_t>(fsize - fsize % ix.entry_size)
            if usable:
                rc = _index_map(ix, fd, usable)
                if rc:
                    _raise_os(rc, path)
                data_end = _data_end(fd, usable)
                # An active segment's extended file: holes, or blocks preallocated whole.
                if data_end < usable or usable >= <size_t>ix.max_entries * <size_t>ix.entry_size:
                    _index_advise_sparse(ix)
                ix.entries = _used_entries(ix.map, ix.map_bytes, ix.entry_size, data_end)
                ix.reserved = <size_t>ix.entries * <size_t>ix.entry_size
                if ix.entries > ix.max_entries:
                    ix.max_entries = ix.entries
        finally:
            c_close(fd)
        return fsize % ix.entry_size != 0

    cdef void _abandon(self) noexcept:
        """Closes everything without touching the files (open failed or was refused)."""
        _index_map(&self._oi, -1, 0)
        _index_map(&self._ti, -1, 0)
        if self._log_fd >= 0:
            c_close(self._log_fd)
        self._log_fd = -1
        self._closed = True

    def __dealloc__(self):
        if not self._closed:
            # Dropped without close(): keep the files as close() would leave them.
            _index_trim(&self._oi, False, False)
            _index_trim(&self._ti, False, False)
        _index_map(&self._oi, -1, 0)
        _index_map(&self._ti, -1, 0)
        if self._log_fd >= 0:
            c_close(self._log_fd)
            self._log_fd = -1
        free(self._window)
        free(self._oi.staged)
        free(self._ti.staged)
        free(self._oi.path)
        free(self._ti.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def __repr__(self):
        state = "closed" if self._closed else f"size={self.size} next_offset={self.next_offset}"
        return f"<Segment {self.path} base_offset={self.base_offset} {state}>"

    # ---- state ------------------------------------------------------------------------

    @property
    def index_entries(self) -> int:
        return self._oi.entries

    @property
    def timeindex_entries(self) -> int:
        return self._ti.entries

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def holds_fd(self) -> bool:
        """True while the .log descriptor is open (always, unless sealed and evicted)."""
        return self._log_fd >= 0

    def fileno(self) -> int:
        """The .log descriptor; for a sealed segment valid only until the next use of
        another sealed segment (the LRU may close it then): pin() to keep it."""
        self._check_open()
        return self._log_fd

    def pin(self) -> int:
        """The .log descriptor, kept open until the matching unpin() (even past close():
        a send in flight finishes on the file it started on)."""
        self._check_open()
        self._readers += 1
        return self._log_fd

    def unpin(self) -> None:
        if self._readers <= 0:
            raise RuntimeError(f"unpin() without pin() on {self.path}")
        self._readers -= 1
        if self._readers == 0 and self._close_deferred:
            self._close_deferred = False
            c_close(self._log_fd)
            self._log_fd = -1

    def seal(self) -> None:
        """Marks the segment as no longer appended to (the log rolled past it): trims its
        indexes to their used entries and lets the open-file LRU close its .log between
        uses. An append unseals it again."""
        cdef int rc
        self._check_idle()
        if self._sealed:
            return
        rc = _index_trim(&self._oi, True, True)
        if rc == 0:
            rc = _index_trim(&self._ti, True, True)
        if rc != 0:
            _raise_os(rc, self.index_path)
        self._sealed = True
        _OPEN_SEALED.add(self)

    cdef int _unseal(self) except -1:
        self._sealed = False
        _OPEN_SEALED.discard(self)
        return 0

    cdef bint _busy(self) noexcept:
        return self._readers > 0 or self._appending > 0 or self._flushing > 0 or self._exclusive

    cdef bint _release_fd(self) noexcept:
        """Closes the .log descriptor of an idle sealed segment and unmaps its indexes
        (the LRU's eviction)."""
        if self._busy() or self._log_fd < 0 or not self._sealed:
            return False
        c_close(self._log_fd)
        self._log_fd = -1
        self._win_len = 0
        _index_map(&self._oi, -1, 0)
        _index_map(&self._ti, -1, 0)
        return True

    cdef int _reopen(self) except -1:
        cdef int rc
        try:
            self._log_fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            # Renamed for deletion while sealed and evicted: to readers, a closed segment.
            raise ValueError(f"I/O operation on a removed segment ({self.path})") from None
        rc = _index_remap(&self._oi)
        if rc == 0:
            rc = _index_remap(&self._ti)
        if rc != 0:
            # Stay evicted (no descriptor, no mapping): the next use tries again.
            _index_map(&self._oi, -1, 0)
            _index_map(&self._ti, -1, 0)
            c_close(self._log_fd)
            self._log_fd = -1
            if rc == ENOENT:
                raise ValueError(f"I/O operation on a removed segment ({self.path})")
            _raise_os(rc, self.index_path)
        _OPEN_SEALED.add(self)
        return 0

    def create_index_files(self) -> None:
        """Makes a new segment's index files ready for its entries now rather than at its
        first entry: creates them, extends them to max_index_bytes, reserves the blocks of
        their first page and maps them. A new file costs the file system hundreds of
        microseconds on a busy ext4, and sizing and mapping two files more; paid here from
        a worker thread, an append of an active segment opens and maps nothing (until
        RESERVE_BYTES of entries, one posix_fallocate each further RESERVE_BYTES). No-op
        once mapped or when the segment is closed or sealed."""
        cdef char *paths[2]
        cdef _Index *ixs[2]
        cdef uint8_t *maps[2]
        cdef size_t want[2]
        cdef size_t reserved[2]
        cdef int i, fd
        cdef bint preallocate = self._oi.preallocate
        cdef struct_stat st
        if self._closed or self._sealed or (self._oi.map != NULL and self._ti.map != NULL):
            return
        ixs[0] = &self._oi
        ixs[1] = &self._ti
        for i in range(2):
            paths[i] = ixs[i].path
            maps[i] = NULL
            reserved[i] = 0
            # Nothing to prepare once an index has entries (it is mapped) or failed.
            want[i] = 0 if (ixs[i].map != NULL or ixs[i].entries > 0 or ixs[i].error) \
                else <size_t>ixs[i].max_entries * <size_t>ixs[i].entry_size
        with nogil:
            for i in range(2):
                fd = c_open(paths[i], O_RDWR | O_CLOEXEC | O_CREAT, 0o644)
                if fd < 0:
                    continue
                if want[i] > 0 and fstat(fd, &st) == 0 and <size_t>st.st_size <= want[i]:
                    reserved[i] = want[i] if preallocate else \
                        (<size_t>INDEX_FIRST_RESERVE_BYTES if want[i] > INDEX_FIRST_RESERVE_BYTES
                         else want[i])
                    if posix_fallocate(fd, 0, <off_t>reserved[i]) != 0 or \
                            ftruncate(fd, <off_t>want[i]) != 0:
                        reserved[i] = 0
                    else:
                        maps[i] = <uint8_t *>mmap(NULL, want[i], PROT_READ | PROT_WRITE,
                                                  MAP_SHARED, fd, 0)
                        if <void *>maps[i] == MAP_FAILED:
                            maps[i] = NULL
                c_close(fd)
        # Back under the GIL: a mapping is taken only by an index still without one and
        # not in use by an append or flush running in another thread; others are dropped
        # (the first entry maps the file then, as without this call).
        for i in range(2):
            if paths[i] != NULL:
                ixs[i].exists = True
            if maps[i] == NULL:
                continue
            if (self._closed or self._sealed or self._appending or self._flushing
                    or ixs[i].map != NULL or ixs[i].entries > 0 or ixs[i].error):
                munmap(<void *>maps[i], want[i])
                continue
            ixs[i].map = maps[i]
            ixs[i].map_bytes = want[i]
            if reserved[i] > ixs[i].reserved:
                ixs[i].reserved = reserved[i]
            _index_advise_sparse(ixs[i])
        if self._closed and not os.path.exists(self.path):
            # Deleted meanwhile: leave no index files behind a .log that is gone.
            for path in (self.index_path, self.timeindex_path):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass

    def is_index_full(self) -> bool:
        """True when either index takes no more entries (Kafka rolls the segment then)."""
        return not (_index_has_room(&self._oi) and _index_has_room(&self._ti))

    cdef int _check_open(self) except -1:
        """Every public operation starts here: the segment is open and its .log descriptor
        too (reopened when the LRU closed it)."""
        if self._closed:
            raise ValueError(f"I/O operation on a closed segment ({self.path})")
        if self._exclusive:
            raise RuntimeError(f"segment {self.path} is being recovered by another thread")
        if self._sealed:
            if self._log_fd < 0:
                self._reopen()
            else:
                _OPEN_SEALED.touch(self)
        return 0

    cdef int _check_idle(self) except -1:
        """Operations that move data under others (truncate, recover, close) must not
        overlap an append or flush running without the GIL in another thread."""
        self._check_open()
        if self._appending or self._flushing:
            raise RuntimeError(f"segment {self.path} is busy (append or flush in progress)")
        return 0

    cdef void _reset_state(self) noexcept nogil:
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self._time_index_last_ts = -1
        self._bytes_since_index = 0
        self._win_len = 0

    # ---- index bookkeeping -------------------------------------------------------------

    cdef void _apply_batch(self, int64_t pos, int64_t base, int64_t last, int64_t max_ts,
                           int64_t total) noexcept nogil:
        """Accounts for one batch written at pos: offsets, timestamps and index points.

        Kafka's rule (LogSegment.append): a batch gets an index entry when more than
        index_interval_bytes were written since the batch of the previous entry started;
        the entry maps the batch's last offset to its position. The time index gets an
        entry at the same points, and only when the max timestamp grew since its last one.
        """
        cdef uint8_t *e
        if pos == 0:
            self.first_batch_timestamp = max_ts
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self._offset_of_max_timestamp = last
        if self._bytes_since_index > self.index_interval_bytes:
            if _index_has_room(&self._oi):
                e = _index_stage_slot(&self._oi)
                if e != NULL:
                    pk_store_u32(e, <uint32_t>(last - self.base_offset))
                    pk_store_u32(e + 4, <uint32_t>pos)
                    self._oi.staged_count += 1
            if self.max_timestamp > self._time_index_last_ts and _index_has_room(&self._ti):
                e = _index_stage_slot(&self._ti)
                if e != NULL:
                    pk_store_u64(e, <uint64_t>self.max_timestamp)
                    pk_store_u32(e + 8, <uint32_t>(self._offset_of_max_timestamp - self.base_offset))
                    self._ti.staged_count += 1
                    self._time_index_last_ts = self.max_timestamp
            self._bytes_since_index = 0
        self._bytes_since_index += total
        self.next_offset = last + 1

    cdef void _commit_indexes(self) noexcept nogil:
        # A failed index write freezes that index (is_index_full() turns True) instead of
        # failing an append whose bytes are already in the log: lookups stay correct,
        # they just scan from an earlier entry.
        _index_commit(&self._oi)
        _index_commit(&self._ti)

    cdef inline int64_t _oi_rel(self, Py_ssize_t slot) noexcept nogil:
        return <int32_t>pk_load_u32(self._oi.map + slot * INDEX_ENTRY_SIZE)

    cdef inline int64_t _oi_pos(self, Py_ssize_t slot) noexcept nogil:
        return <int32_t>pk_load_u32(self._oi.map + slot * INDEX_ENTRY_SIZE + 4)

    cdef inline int64_t _ti_ts(self, Py_ssize_t slot) noexcept nogil:
        return <int64_t>pk_load_u64(self._ti.map + slot * TIMEINDEX_ENTRY_SIZE)

    cdef inline int64_t _ti_rel(self, Py_ssize_t slot) noexcept nogil:
        return <int32_t>pk_load_u32(self._ti.map + slot * TIMEINDEX_ENTRY_SIZE + 8)

    cdef inline int64_t _index_floor_position(self, int64_t offset) noexcept nogil:
        """Position of the last index entry whose offset is <= offset (0 when none)."""
        cdef int64_t rel = offset - self.base_offset
        cdef Py_ssize_t slot
        if rel > INT32_MAX:
            rel = INT32_MAX
        slot = _floor_slot(self._oi.map, self._oi.entries, INDEX_ENTRY_SIZE, 0, False, rel)
        return 0 if slot < 0 else self._oi_pos(slot)

    # ---- reading batch headers from the .log ------------------------------------------

    cdef int _read_header(self, int64_t pos, pk_batch_header *h) except -2:
        """The header of the batch at pos, through the window. PK_BATCH_OK,
        PK_BATCH_INCOMPLETE (no whole batch before `size`) or PK_BATCH_CORRUPT."""
        cdef int64_t avail = self.size - pos
        cdef ssize_t got
        cdef size_t want
        cdef pk_batch_error err
        cdef int rc
        if pos < 0 or avail < _batch.PK_BATCH_HEADER_SIZE:
            return _batch.PK_BATCH_INCOMPLETE
        if not (pos >= self._win_pos and pos + _batch.PK_BATCH_HEADER_SIZE <= self._win_pos + self._win_len):
            if self._win_len and self._win_pos <= pos < self._win_pos + self._win_len + WINDOW_BYTES:
                want = WINDOW_BYTES       # a walk running on past the window
            else:
                want = WINDOW_FIRST_BYTES
            if <int64_t>want > avail:
                want = <size_t>avail
            self._win_len = 0
            got = _pread_all(self._log_fd, self._window, want, pos)
            if got < 0:
                _raise_os(<int>-got, self.path)
                return -2
            self._win_pos = pos
            self._win_len = got
            if got < _batch.PK_BATCH_HEADER_SIZE:
                return _batch.PK_BATCH_INCOMPLETE
        rc = _batch.pk_batch_parse_header(self._window + (pos - self._win_pos), _batch.PK_BATCH_HEADER_SIZE, h, &err)
        if rc != _batch.PK_BATCH_OK:
            return _batch.PK_BATCH_CORRUPT
        if h.last_offset_delta < 0:
            return _batch.PK_BATCH_CORRUPT
        if <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD > avail:
            return _batch.PK_BATCH_INCOMPLETE
        return _batch.PK_BATCH_OK

    cdef int _header_or_raise(self, int64_t pos, pk_batch_header *h) except -1:
        """Like _read_header for positions that must hold a whole batch."""
        cdef int rc = self._read_header(pos, h)
        if rc == _batch.PK_BATCH_OK:
            return 0
        raise CorruptBatchError(
            f"no valid batch header at position {pos} of {self.path} (size {self.size});"
            " the segment needs recover()", "batch_length", pos, pos + _batch.PK_BATCH_LENGTH)

    cdef int64_t _position_of(self, int64_t offset) except -1:
        cdef pk_batch_header h
        cdef int64_t pos
        if offset >= self.next_offset:
            return self.size
        pos = self._index_floor_position(offset) if offset > self.base_offset else 0
        while pos < self.size:
            self._header_or_raise(pos, &h)
            if h.base_offset + h.last_offset_delta >= offset:
                return pos
            pos += <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
        return self.size

    # ---- opening ----------------------------------------------------------------------

    cdef object _load_from_indexes(self):
        """Finds next_offset and max_timestamp from the indexes and the log tail (Kafka's
        readNextOffset), with cheap consistency checks. Returns why the indexes cannot be
        trusted, or None."""
        cdef pk_batch_header h
        cdef int64_t pos = 0, last_rel = -1, end, last, tail_max = -1, tail_max_off = -1
        cdef int rc
        cdef Py_ssize_t n
        self._reset_state()
        if self.size == 0:
            if self._oi.entries or self._ti.entries:
                return "index entries for an empty log"
            return None
        n = self._oi.entries
        if n:
            last_rel = self._oi_rel(n - 1)
            pos = self._oi_pos(n - 1)
            if last_rel < 0 or pos < 0 or pos >= self.size or (
                    n > 1 and (self._oi_rel(n - 2) >= last_rel or self._oi_pos(n - 2) >= pos)):
                return "last offset index entry out of order or outside the log"
            if self._read_header(pos, &h) != _batch.PK_BATCH_OK or \
                    h.base_offset + h.last_offset_delta != self.base_offset + last_rel:
                return "last offset index entry is not at the batch it names"
        end = pos
        last = -1
        while end < self.size:
            rc = self._read_header(end, &h)
            if rc != _batch.PK_BATCH_OK or h.base_offset <= last or h.base_offset < self.base_offset:
                # torn or damaged tail: serve the whole batches before it, recover() the rest
                self.needs_recovery = True
                self.size = end
                break
            last = h.base_offset + h.last_offset_delta
            if h.max_timestamp > tail_max:
                tail_max = h.max_timestamp
                tail_max_off = last
            end += <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
        if last >= 0:
            self.next_offset = last + 1
        self._bytes_since_index = self.size - pos
        if self._ti.entries:
            n = self._ti.entries
            if self._ti_ts(n - 1) < self._ti_ts(0) or self._ti_rel(n - 1) < 0 or \
                    self.base_offset + self._ti_rel(n - 1) >= self.next_offset or \
                    (n > 1 and self._ti_ts(n - 2) >= self._ti_ts(n - 1)):
                return "time index entries out of order or beyond the log"
            self._time_index_last_ts = self._ti_ts(n - 1)
            self.max_timestamp = self._time_index_last_ts
            self._offset_of_max_timestamp = self.base_offset + self._ti_rel(n - 1)
        if tail_max > self.max_timestamp:
            self.max_timestamp = tail_max
            self._offset_of_max_timestamp = tail_max_off
        if self.size >= _batch.PK_BATCH_HEADER_SIZE and self._read_header(0, &h) == _batch.PK_BATCH_OK:
            self.first_batch_timestamp = h.max_timestamp
        return None

    # ---- append -----------------------------------------------------------------------

    def append(self, buf, Py_ssize_t start=0, end=None) -> int:
        """Appends the whole batches in buf[start:end]; returns the position written at."""
        return self._append(buf, start, end)

    def append_active(self, buf, int64_t segment_bytes, int64_t max_segment_ms) -> int:
        """The Produce lane's append of one batch whose offsets the leader assigned
        (``buf``, exactly one magic-2 batch): the position written at, or -1 with nothing
        written when the log may have to roll first (the decisions of
        ``Log._roll_reason``: segment.bytes, segment.ms / max.compaction.lag.ms by the
        batch's largest timestamp, a full index, an offset out of the relative range;
        and a segment without a first timestamp, whose age needs the clock). The caller
        hands those appends to the log. A failed write raises as ``append`` does."""
        cdef Py_buffer view
        cdef int64_t size, last
        cdef const uint8_t *data
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            size = view.len
            if size < _batch.PK_BATCH_HEADER_SIZE:
                raise ValueError(f"{size} bytes hold no batch")
            data = <const uint8_t *>view.buf
            last = <int64_t>pk_load_u64(data) + <int32_t>pk_load_u32(data + _batch.PK_BATCH_LAST_OFFSET_DELTA)
            if self.size != 0:
                if self.size > segment_bytes - size:
                    return -1
                if self.first_batch_timestamp < 0 or \
                        <int64_t>pk_load_u64(data + _batch.PK_BATCH_MAX_TIMESTAMP) - self.first_batch_timestamp \
                        > max_segment_ms:
                    return -1
                if not (_index_has_room(&self._oi) and _index_has_room(&self._ti)):
                    return -1
            if last - self.base_offset > INT32_MAX:
                return -1
        finally:
            PyBuffer_Release(&view)
        return self._append(buf, 0, None)

    cdef int64_t _append(self, buf, Py_ssize_t start, object end) except -1:
        cdef Py_buffer view
        cdef Py_ssize_t stop, p
        cdef const uint8_t *data
        cdef pk_batch_header h
        cdef pk_batch_error err
        cdef int64_t prev_last, total, last, position, length
        cdef int rc
        self._check_open()
        if self.needs_recovery:
            raise RuntimeError(f"{self.path} ends in a torn or damaged batch; call recover() first")
        if self._appending:
            raise RuntimeError(f"segment {self.path}: another append is in progress")
        if self._sealed:
            self._unseal()
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            stop = view.len if end is None else <Py_ssize_t>end
            if start < 0 or stop < start or stop > view.len:
                raise ValueError(f"range [{start}, {stop}) outside a buffer of {view.len} bytes")
            data = <const uint8_t *>view.buf
            # Pass 1: every header is sound and offsets follow on, before any byte is written.
            prev_last = self.next_offset - 1
            p = start
            while p < stop:
                rc = _batch.pk_batch_parse_header(data + p, <size_t>(stop - p), &h, &err)
                if rc == _batch.PK_BATCH_INCOMPLETE:
                    raise CorruptBatchError("buffer ends inside a batch header", "batch_length",
                                            p, p + _batch.PK_BATCH_LENGTH)
                if rc != _batch.PK_BATCH_OK:
                    raise CorruptBatchError(err.message.decode("ascii", "replace"),
                                            err.field.decode("ascii"), p, p + <Py_ssize_t>err.offset)
                total = <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
                if total > stop - p:
                    raise CorruptBatchError("batch_length runs past the end of the buffer",
                                            "batch_length", p, p + _batch.PK_BATCH_LENGTH)
                if h.last_offset_delta < 0:
                    raise CorruptBatchError("negative last_offset_delta", "last_offset_delta",
                                            p, p + _batch.PK_BATCH_LAST_OFFSET_DELTA)
                if h.base_offset <= prev_last:
                    raise ValueError(f"batch at byte {p} has base_offset {h.base_offset}, "
                                     f"not after offset {prev_last} already in the segment")
                last = h.base_offset + h.last_offset_delta
                if last - self.base_offset > INT32_MAX:
                    raise ValueError(f"offset {last} is beyond the relative-offset range of the "
                                     f"segment based at {self.base_offset}; roll a new segment")
                prev_last = last
                p += <Py_ssize_t>total
            length = stop - start
            if length == 0:
                return self.size
            position = self.size
            if position + length > INT32_MAX:
                raise ValueError(f"appending {length} bytes would take {self.path} past the "
                                 "2 GiB that index positions can address; roll a new segment")
            # Write: the only slow part, without the GIL.
            self._appending += 1
            with nogil:
                rc = _pwrite_all(self._log_fd, data + start, <size_t>length, position)
            self._appending -= 1
            if rc != 0:
                # Leave no partial batch behind (a partial write is possible on ENOSPC).
                ftruncate(self._log_fd, <off_t>position)
                _raise_os(rc)
            # Pass 2: state and index points (headers already checked).
            p = start
            while p < stop:
                total = <int64_t>(<int32_t>pk_load_u32(data + p + _batch.PK_BATCH_LENGTH)) \
                    + _batch.PK_BATCH_LOG_OVERHEAD
                self._apply_batch(
                    position + (p - start),
                    <int64_t>pk_load_u64(data + p),
                    <int64_t>pk_load_u64(data + p) + <int32_t>pk_load_u32(data + p + _batch.PK_BATCH_LAST_OFFSET_DELTA),
                    <int64_t>pk_load_u64(data + p + _batch.PK_BATCH_MAX_TIMESTAMP),
                    total)
                p += <Py_ssize_t>total
            self.size = position + length
            self._commit_indexes()
            return position
        finally:
            PyBuffer_Release(&view)

    # ---- lookups ----------------------------------------------------------------------

    def index_lookup(self, int64_t offset):
        """(offset, position) of the last .index entry at or below offset, or
        (base_offset, 0) when there is none (Kafka's OffsetIndex.lookup)."""
        cdef Py_ssize_t slot
        self._check_open()
        if offset - self.base_offset > INT32_MAX:
            offset = self.base_offset + INT32_MAX
        slot = _floor_slot(self._oi.map, self._oi.entries, INDEX_ENTRY_SIZE, 0, False,
                           offset - self.base_offset)
        if slot < 0:
            return (self.base_offset, 0)
        return (self.base_offset + self._oi_rel(slot), self._oi_pos(slot))

    def timeindex_lookup(self, int64_t timestamp):
        """(timestamp, offset) of the last .timeindex entry at or below timestamp, or
        (-1, base_offset) when there is none (Kafka's TimeIndex.lookup)."""
        cdef Py_ssize_t slot
        self._check_open()
        slot = _floor_slot(self._ti.map, self._ti.entries, TIMEINDEX_ENTRY_SIZE, 0, True, timestamp)
        if slot < 0:
            return (-1, self.base_offset)
        return (self._ti_ts(slot), self.base_offset + self._ti_rel(slot))

    def index_entry(self, Py_ssize_t i):
        """The i-th .index entry as (offset, position)."""
        self._check_open()
        if not 0 <= i < self._oi.entries:
            raise IndexError(f"index entry {i} of {self._oi.entries}")
        return (self.base_offset + self._oi_rel(i), self._oi_pos(i))

    def timeindex_entry(self, Py_ssize_t i):
        """The i-th .timeindex entry as (timestamp, offset)."""
        self._check_open()
        if not 0 <= i < self._ti.entries:
            raise IndexError(f"time index entry {i} of {self._ti.entries}")
        return (self._ti_ts(i), self.base_offset + self._ti_rel(i))

    def position_of(self, int64_t offset) -> int:
        """Start of the first batch whose last offset is >= offset, or size."""
        self._check_open()
        return self._position_of(offset)

    def read(self, int64_t offset, int64_t max_bytes, int64_t max_position=-1):
        """(position, length) of whole batches from the one holding offset; see .pyi."""
        cdef pk_batch_header h
        cdef int64_t cap, start, first_end, limit, p, q
        cdef Py_ssize_t slot
        self._check_open()
        if offset >= self.next_offset:
            return None
        cap = self.size if max_position < 0 or max_position > self.size else max_position
        start = self._position_of(offset)
        if start >= cap:
            return None
        self._header_or_raise(start, &h)
        first_end = start + h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
        if first_end > cap:
            return None
        limit = cap if max_bytes > cap - start else start + (max_bytes if max_bytes > 0 else 0)
        if limit <= first_end:
            return (start, first_end - start)
        if limit == self.size:
            return (start, limit - start)   # the log ends on a batch boundary: no walk
        # Jump to the last index point at or below the limit, then walk the few batches
        # between it and the limit, so a large max_bytes costs no long header walk.
        p = first_end
        slot = _floor_slot(self._oi.map, self._oi.entries, INDEX_ENTRY_SIZE, 4, False, limit)
        if slot >= 0 and self._oi_pos(slot) > p:
            p = self._oi_pos(slot)
        while p < limit:
            self._header_or_raise(p, &h)
            q = p + h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
            if q > limit:
                break
            p = q
        return (start, p - start)

    def offset_for_timestamp(self, int64_t timestamp):
        """base_offset of the first batch whose max_timestamp >= timestamp, or None."""
        cdef pk_batch_header h
        cdef int64_t pos = 0
        cdef Py_ssize_t slot
        self._check_open()
        if self.size == 0 or timestamp > self.max_timestamp:
            return None
        # Batches before the one that first reached an entry's timestamp all have smaller
        # max timestamps, so the scan can start at that batch.
        slot = _floor_slot(self._ti.map, self._ti.entries, TIMEINDEX_ENTRY_SIZE, 0, True, timestamp)
        if slot >= 0:
            pos = self._index_floor_position(self.base_offset + self._ti_rel(slot))
        while pos < self.size:
            self._header_or_raise(pos, &h)
            if h.max_timestamp >= timestamp:
                return h.base_offset
            pos += <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
        return None

    # ---- truncation -------------------------------------------------------------------

    def truncate_to(self, int64_t offset) -> int:
        """Removes every batch whose base_offset >= offset; returns the bytes removed."""
        cdef pk_batch_header h
        cdef int64_t pos, removed, cut_offset
        cdef Py_ssize_t keep
        self._check_idle()
        if offset >= self.next_offset or self.size == 0:
            return 0
        pos = self._position_of(offset)
        if pos < self.size:
            self._header_or_raise(pos, &h)
            if h.base_offset < offset:
                pos += <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
        if pos >= self.size:
            return 0
        self._header_or_raise(pos, &h)
        cut_offset = h.base_offset
        removed = self.size - pos
        if ftruncate(self._log_fd, <off_t>pos) != 0:
            _raise_os(errno)
        self.size = pos
        self._win_len = 0
        self._commit_indexes()
        keep = _floor_slot(self._oi.map, self._oi.entries, INDEX_ENTRY_SIZE, 4, False, pos - 1) + 1
        _index_truncate(&self._oi, keep)
        keep = _floor_slot(self._ti.map, self._ti.entries, TIMEINDEX_ENTRY_SIZE, 8, False,
                           cut_offset - 1 - self.base_offset) + 1
        # Time index relative offsets only never decrease (equal ones are possible in a
        # damaged file), so make sure no kept entry reaches the cut.
        while keep > 0 and self.base_offset + self._ti_rel(keep - 1) >= cut_offset:
            keep -= 1
        _index_truncate(&self._ti, keep)
        reason = self._load_from_indexes()
        if reason is not None:
            self.rebuild_indexes()
        return removed

    # ---- recovery ---------------------------------------------------------------------

    cdef int64_t _scan_apply(self, const uint8_t *data, int64_t pos, int64_t stop,
                             int64_t file_end, bint check_crc, size_t max_batch_size,
                             int checks, bint *bad) noexcept nogil:
        """Walks the batches starting before stop, applying each to the indexes and state;
        sets *bad at the first batch that is torn, corrupt or out of order."""
        cdef pk_batch_header h
        cdef pk_batch_error err
        cdef int64_t total, last
        cdef int rc
        while pos < stop:
            if check_crc:
                rc = _batch.pk_batch_validate(data + pos, <size_t>(file_end - pos),
                                              max_batch_size, checks, &h, &err)
            else:
                rc = _batch.pk_batch_parse_header(data + pos, <size_t>(file_end - pos), &h, &err)
                if rc == _batch.PK_BATCH_OK and \
                        <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD > file_end - pos:
                    rc = _batch.PK_BATCH_INCOMPLETE
            if rc != _batch.PK_BATCH_OK or h.last_offset_delta < 0:
                bad[0] = True
                return pos
            total = <int64_t>h.batch_length + _batch.PK_BATCH_LOG_OVERHEAD
            last = h.base_offset + h.last_offset_delta
            if h.base_offset < self.next_offset or last - self.base_offset > INT32_MAX \
                    or pos + total > INT32_MAX:
                bad[0] = True
                return pos
            self._apply_batch(pos, h.base_offset, last, h.max_timestamp, total)
            pos += total
        return pos

    cdef int64_t _rescan(self, bint check_crc, size_t max_batch_size, int checks,
                         object progress, int64_t progress_interval) except -1:
        """Rebuilds indexes and state from a walk of the whole .log file; returns the end
        of the last good batch (the file itself is not changed)."""
        cdef int64_t file_size, pos = 0, stop
        cdef const uint8_t *data = NULL
        cdef void *m
        cdef bint bad = False
        cdef int rc
        file_size = _file_size(self._log_fd)
        self._reset_state()
        rc = _index_reset(&self._oi)
        if rc == 0:
            rc = _index_reset(&self._ti)
        if rc != 0:
            _raise_os(rc)
        if progress_interval <= 0:
            progress_interval = PROGRESS_INTERVAL_BYTES
        if file_size > 0:
            m = mmap(NULL, <size_t>file_size, PROT_READ, MAP_SHARED, self._log_fd, 0)
            if m == MAP_FAILED:
                _raise_os(errno)
            data = <const uint8_t *>m
            posix_madvise(m, <size_t>file_size, POSIX_MADV_SEQUENTIAL)
        self._exclusive = True
        self.needs_recovery = True     # until the walk completes
        try:
            while pos < file_size and not bad:
                stop = pos + progress_interval
                if stop > file_size:
                    stop = file_size
                with nogil:
                    pos = self._scan_apply(data, pos, stop, file_size, check_crc,
                                           max_batch_size, checks, &bad)
                if progress is not None:
                    progress(pos, file_size)
            self._commit_indexes()
            self.needs_recovery = False
        finally:
            self._exclusive = False
            if data != NULL:
                munmap(<void *>data, <size_t>file_size)
        self.size = pos
        self._win_len = 0
        return pos

    def recover(self, size_t max_batch_size=0, progress=None, *, bint check_records=False,
                int64_t progress_interval=PROGRESS_INTERVAL_BYTES) -> int:
        """Validates every batch, truncates at the first bad byte, rebuilds the indexes;
        returns the number of bytes truncated."""
        cdef int64_t file_size, valid
        self._check_idle()
        file_size = _file_size(self._log_fd)
        valid = self._rescan(True, max_batch_size, 1 if check_records else 0, progress,
                             progress_interval)
        if valid < file_size:
            if ftruncate(self._log_fd, <off_t>valid) != 0:
                self.needs_recovery = True
                _raise_os(errno)
        self.needs_recovery = False
        return file_size - valid

    def rebuild_indexes(self) -> None:
        """Rebuilds both indexes from the batch headers of the .log (no CRC check)."""
        cdef int64_t file_size, valid
        self._check_idle()
        file_size = _file_size(self._log_fd)
        valid = self._rescan(False, 0, 0, None, 0)
        self.needs_recovery = valid < file_size

    def sanity_check(self, *, bint deep=False) -> bool:
        """True when both indexes are consistent with each other and with the log."""
        cdef pk_batch_header h
        cdef Py_ssize_t i, n
        cdef int64_t prev_rel = -1, prev_pos = -1, prev_ts = -1, rel, pos, ts
        self._check_open()
        self._commit_indexes()
        n = self._oi.entries
        for i in range(n):
            rel = self._oi_rel(i)
            pos = self._oi_pos(i)
            if rel <= prev_rel or pos <= prev_pos or pos >= self.size or \
                    self.base_offset + rel >= self.next_offset:
                return False
            if deep or i == n - 1:
                if self._read_header(pos, &h) != _batch.PK_BATCH_OK or \
                        h.base_offset + h.last_offset_delta != self.base_offset + rel:
                    return False
            prev_rel = rel
            prev_pos = pos
        prev_rel = -1
        n = self._ti.entries
        for i in range(n):
            ts = self._ti_ts(i)
            rel = self._ti_rel(i)
            if (i > 0 and ts <= prev_ts) or rel < prev_rel or rel < 0 or \
                    self.base_offset + rel >= self.next_offset or ts > self.max_timestamp:
                return False
            prev_ts = ts
            prev_rel = rel
        return True

    # ---- durability and lifecycle -----------------------------------------------------

    def flush(self) -> None:
        """fsync the .log and both indexes (without the GIL; safe from a worker thread)."""
        cdef int rc = 0
        self._check_open()
        self._commit_indexes()
        self._flushing += 1
        with nogil:
            if fsync(self._log_fd) != 0:
                rc = errno
            else:
                rc = _index_sync(&self._oi)
                if rc == 0:
                    rc = _index_sync(&self._ti)
        self._flushing -= 1
        if rc:
            _raise_os(rc)

    def close(self) -> None:
        """Trims the indexes to their used size and closes the files. Idempotent. A pinned
        .log descriptor stays open until the last unpin()."""
        cdef int rc1, rc2, rc3 = 0
        cdef bint create
        if self._closed:
            return
        if self._exclusive or self._appending or self._flushing:
            self._check_idle()   # raises the busy error
        # Index files a new segment never needed are created now, so a closed segment
        # has its three files, unless the .log itself was renamed for deletion.
        create = os.path.exists(self.path)
        self._closed = True
        _OPEN_SEALED.discard(self)
        rc1 = _index_trim(&self._oi, False, create)
        rc2 = _index_trim(&self._ti, False, create)
        if self._readers > 0:
            self._close_deferred = True
        elif self._log_fd >= 0:
            if c_close(self._log_fd) != 0:
                rc3 = errno
            self._log_fd = -1
        if rc1 == 0:
            rc1 = rc2 if rc2 != 0 else rc3
        if rc1 != 0:
            _raise_os(rc1, self.path)

    def delete(self) -> None:
        """Closes the segment and removes its three files."""
        self.close()
        for p in (self.path, self.index_path, self.timeindex_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

