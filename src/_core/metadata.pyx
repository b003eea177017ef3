# cython: language_level=3
"""Metadata partitions encoder (apache/kafka MetadataResponse.json, v0-v13): the
``topics[].partitions`` array of a MetadataResponse, compiled.

A topic of thousands of partitions is encoded in one pass, over plain tuples of ints
(``encode_partitions``) or straight from the metadata store's partition states
(``encode_partition_states``: no Python object made per partition), byte for byte what the generic table-driven codec (pykfk.protocol.codec) writes for the
same partitions; tests/protocol/test_fast_path_metadata.py checks this on every version.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from cpython.dict cimport PyDict_GetItem
from cpython.long cimport PyLong_FromSsize_t
from cpython.set cimport PyAnySet_Check, PySet_Contains
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from _out cimport Out as _Out, put_count as _put_count, reserve as _reserve


cdef extern from "Python.h":
    # Declared here (not from cpython.long) to test the error indicator ourselves: a
    # non-integer's TypeError is replaced by one that names the field.
    long long PyLong_AsLongLongAndOverflow(object, int*) noexcept
    PyObject* PyErr_Occurred() noexcept
    int PyErr_ExceptionMatches(object) noexcept
    void PyErr_Clear() noexcept


# Versions this module encodes (MetadataResponse.json "validVersions" as declared in
# pykfk.protocol.messages.metadata) and the first flexible one (KIP-482).
METADATA_MIN_VERSION = 0
METADATA_MAX_VERSION = 13
METADATA_FLEXIBLE_FROM = 9

# ---------------------------------------------------------------------------------------
#   partitions                array of (int32 count; v9+ uvarint count + 1)
#     error_code              int16
#     partition_index         int32
#     leader_id               int32
#     leader_epoch            int32                 v7+
#     replica_nodes           array of int32
#     isr_nodes               array of int32
#     offline_replicas        array of int32        v5+
#     [tagged fields]                               v9+ (none declared: one 0 byte)
#
# None of the arrays is nullable. Fixed part of one entry: 2 + 4 + 4 (+ 4 from v7) bytes,
# then the three arrays (4-byte counts classic, 1-byte counts compact below 127 nodes).

cdef inline void _be16(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v


cdef inline void _be32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline Py_ssize_t _uvarint(uint8_t* p, uint64_t v) noexcept nogil:
    """Writes ``v`` (at most 2**32 - 1) as an unsigned varint at ``p``; its length."""
    cdef Py_ssize_t n = 0
    while v >= 0x80:
        p[n] = <uint8_t>((v & 0x7F) | 0x80)
        v >>= 7
        n += 1
    p[n] = <uint8_t>v
    return n + 1


cdef int _out_of_range(object value, str field, Py_ssize_t entry, int bits) except -1:
    raise OverflowError(f"partition entry {entry}: {field} {value!r} does not fit in int{bits}")


cdef inline int64_t _int(object value, str field, Py_ssize_t entry, int bits) except? -1:
    """``value`` as a signed int of ``bits`` bits; OverflowError (TypeError for a
    non-integer) naming the field otherwise, as struct.pack refuses it."""
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if v == -1 and PyErr_Occurred() != NULL:
        if not PyErr_ExceptionMatches(TypeError):
            return -1  # the error of the value's own __index__, passed on as raised
        PyErr_Clear()
        raise TypeError(f"partition entry {entry}: {field} {value!r} is not an integer") from None
    if overflow != 0:
        _out_of_range(value, field, entry, bits)
    if bits == 16:
        if v < -0x8000 or v > 0x7FFF:
            _out_of_range(value, field, entry, bits)
    elif v < -0x80000000 or v > 0x7FFFFFFF:
        _out_of_range(value, field, entry, bits)
    return v


cdef tuple _fast_sequence(object value, str field, Py_ssize_t entry):
    """``value`` as a tuple (itself when it is one): its items are then read in place,
    and no ``__index__`` of an item can change the sequence under the loop; TypeError
    naming the field when it is not iterable."""
    if type(value) is tuple:
        return <tuple>value
    try:
        return tuple(value)
    except TypeError:
        where = "" if entry < 0 else f"partition entry {entry}: "
        raise TypeError(f"{where}{field} {value!r:.60} is not a sequence") from None


cdef int _put_nodes(_Out* o, object nodes, str field, Py_ssize_t entry, bint compact) except -1:
    """A non-nullable array of int32 node ids (any iterable of ints; a tuple is read in
    place)."""
    if nodes is None:
        raise ValueError(f"partition entry {entry}: None for the non-nullable array {field}")
    cdef tuple seq = _fast_sequence(nodes, field, entry)
    cdef Py_ssize_t n = PyTuple_GET_SIZE(seq)
    cdef Py_ssize_t i
    if n > 0x7FFFFFFE:
        raise ValueError(f"partition entry {entry}: {field} longer than 2**31-2 elements")
    _reserve(o, 5 + 4 * n)
    if compact:
        o.len += _uvarint(o.data + o.len, <uint64_t>(n + 1))
    else:
        _be32(o.data + o.len, <uint32_t>n)
        o.len += 4
    for i in range(n):
        _be32(o.data + o.len, <uint32_t>_int(<object>PyTuple_GET_ITEM(seq, i), field, entry, 32))
        o.len += 4
    return 0


cdef int _put_partition(_Out* o, object partition, Py_ssize_t entry, int version, bint compact) except -1:
    cdef tuple t = _fast_sequence(partition, "partition", entry)
    if len(t) != 7:
        raise ValueError(
            f"partition entry {entry}: {len(t)} items, expected 7 (error_code, "
            "partition_index, leader_id, leader_epoch, replica_nodes, isr_nodes, offline_replicas)")
    _reserve(o, 14)
    _be16(o.data + o.len, <uint32_t>_int(t[0], "error_code", entry, 16))
    _be32(o.data + o.len + 2, <uint32_t>_int(t[1], "partition_index", entry, 32))
    _be32(o.data + o.len + 6, <uint32_t>_int(t[2], "leader_id", entry, 32))
    o.len += 10
    if version >= 7:
        _be32(o.data + o.len, <uint32_t>_int(t[3], "leader_epoch", entry, 32))
        o.len += 4
    _put_nodes(o, t[4], "replica_nodes", entry, compact)
    _put_nodes(o, t[5], "isr_nodes", entry, compact)
    if version >= 5:
        _put_nodes(o, t[6], "offline_replicas", entry, compact)
    if compact:
        _reserve(o, 1)
        o.data[o.len] = 0
        o.len += 1
    return 0


cdef bint _compact_arrays(int version) except -1:
    """Whether Metadata ``version`` writes compact arrays; ValueError for one not served."""
    if version < METADATA_MIN_VERSION or version > METADATA_MAX_VERSION:
        raise ValueError(f"Metadata v{version} is outside {METADATA_MIN_VERSION}-{METADATA_MAX_VERSION}")
    return version >= METADATA_FLEXIBLE_FROM


def encode_partitions(int version, partitions):
    """The ``partitions`` array of one MetadataResponse topic at ``version`` (0-13), with
    its count prefix, as ``bytes``: what the generic encoder writes for the field
    ``topics[].partitions`` given the same values.

    ``partitions`` is a sequence of 7-tuples ``(error_code, partition_index, leader_id,
    leader_epoch, replica_nodes, isr_nodes, offline_replicas)`` in the schema's field
    order, the node lists sequences of ints; fields a version lacks (leader_epoch before
    v7, offline_replicas before v5) are read but not written. Raises ValueError for a
    version outside 0-13, an entry that is not a 7-tuple or a None array, OverflowError
    for an int that does not fit its field and TypeError for a value that is not an int.
    """
    cdef bint compact = _compact_arrays(version)
    cdef tuple seq = _fast_sequence(partitions, "partitions", -1)
    cdef Py_ssize_t n = PyTuple_GET_SIZE(seq)
    cdef Py_ssize_t i
    if n > 0x7FFFFFFE:
        raise ValueError("partitions longer than 2**31-2 entries")
    cdef _Out o
    # One replica, one ISR member and no offline replica: 27 bytes classic at v7+, 21
    # compact; room for that per partition avoids any regrowth in the common case.
    o.cap = 64 + 28 * n
    o.len = 0
    o.data = <uint8_t*>PyMem_Malloc(<size_t>o.cap)
    if o.data == NULL:
        raise MemoryError()
    try:
        _put_count(&o, n, compact)
        for i in range(n):
            _put_partition(&o, <object>PyTuple_GET_ITEM(seq, i), i, version, compact)
        return PyBytes_FromStringAndSize(<const char*>o.data, o.len)
    finally:
        PyMem_Free(o.data)


# Kafka's error codes of a partition entry (pykfk.errors.ErrorCode.NONE and
# LEADER_NOT_AVAILABLE), and the leader id of a partition without one (NO_LEADER).
cdef int _NONE = 0
cdef int _LEADER_NOT_AVAILABLE = 5
cdef long long _NO_LEADER = -1


cdef int _put_offline(_Out* o, tuple replicas, object live, bint live_is_set, Py_ssize_t entry,
                      bint compact) except -1:
    """The replicas not in ``live``, in replica order, as a non-nullable int32 array."""
    cdef Py_ssize_t n = PyTuple_GET_SIZE(replicas)
    cdef Py_ssize_t i, count = 0
    cdef int found
    cdef uint8_t* flags = <uint8_t*>PyMem_Malloc(<size_t>(n if n > 0 else 1))
    if flags == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            item = <object>PyTuple_GET_ITEM(replicas, i)
            found = PySet_Contains(live, item) if live_is_set else (item in live)
            flags[i] = found == 0
            count += flags[i]
        _reserve(o, 5 + 4 * count)
        if compact:
            o.len += _uvarint(o.data + o.len, <uint64_t>(count + 1))
        else:
            _be32(o.data + o.len, <uint32_t>count)
            o.len += 4
        for i in range(n):
            if flags[i]:
                _be32(o.data + o.len, <uint32_t>_int(<object>PyTuple_GET_ITEM(replicas, i),
                                                     "offline_replicas", entry, 32))
                o.len += 4
    finally:
        PyMem_Free(flags)
    return 0


def encode_partition_states(int version, states, assignment, default_replicas, live):
    """The ``partitions`` array of one MetadataResponse topic at ``version`` (0-13), with
    its count prefix, as ``bytes``, read straight from a metadata store's view of the
    topic: entry ``p`` is partition ``p``, whose state is ``states[p]`` (a
    ``PartitionState`` or None) and whose replicas are ``assignment.get(p,
    default_replicas)``; offline replicas are those not in ``live``.

    The same bytes as ``encode_partitions`` given the tuples
    ``pykfk.server.handlers.metadata.partition_entries`` builds, without building them:
    a partition without a state, or with leader -1, is LEADER_NOT_AVAILABLE (leader -1,
    leader epoch -1 and an empty ISR without a state). A state or a replica tuple shared
    with the previous partition (the embedded store shares one state by all) is read
    once. Errors as ``encode_partitions``, naming the partition's entry.
    """
    cdef bint compact = _compact_arrays(version)
    cdef tuple seq = _fast_sequence(states, "states", -1)
    cdef tuple default = _fast_sequence(default_replicas, "default_replicas", -1)
    cdef Py_ssize_t n = PyTuple_GET_SIZE(seq)
    if n > 0x7FFFFFFE:
        raise ValueError("partitions longer than 2**31-2 entries")
    if live is None:
        raise TypeError("live must be a set of broker ids")
    cdef bint live_is_set = PyAnySet_Check(live)
    cdef bint assignment_is_dict = type(assignment) is dict
    cdef bint no_assignment = len(assignment) == 0
    cdef object get_replicas = None if assignment_is_dict or no_assignment else assignment.get
    cdef Py_ssize_t i
    cdef PyObject* found
    cdef object state, key, value
    cdef object last_state = None          # the state whose fields are below
    cdef bint have_state = False
    cdef int error_code = _LEADER_NOT_AVAILABLE
    cdef long long leader = _NO_LEADER, epoch = -1
    cdef tuple isr = ()
    cdef object last_replicas = None       # the replica tuple whose offline array is below
    cdef tuple replicas
    cdef _Out o
    cdef _Out offline                      # the encoded offline array of last_replicas
    o.cap = 64 + 28 * n
    o.len = 0
    o.data = <uint8_t*>PyMem_Malloc(<size_t>o.cap)
    offline.cap = 64
    offline.len = 0
    offline.data = <uint8_t*>PyMem_Malloc(<size_t>offline.cap)
    if o.data == NULL or offline.data == NULL:
        PyMem_Free(o.data)
        PyMem_Free(offline.data)
        raise MemoryError()
    try:
        _put_count(&o, n, compact)
        for i in range(n):
            state = <object>PyTuple_GET_ITEM(seq, i)
            if not have_state or state is not last_state:
                if state is None:
                    error_code, leader, epoch, isr = _LEADER_NOT_AVAILABLE, _NO_LEADER, -1, ()
                else:
                    leader = _int(state.leader, "leader_id", i, 32)
                    epoch = _int(state.leader_epoch, "leader_epoch", i, 32)
                    isr = _fast_sequence(state.isr, "isr_nodes", i)
                    error_code = _LEADER_NOT_AVAILABLE if leader == _NO_LEADER else _NONE
                last_state = state
                have_state = True
            if no_assignment:
                value = default
            else:
                key = PyLong_FromSsize_t(i)
                if assignment_is_dict:
                    found = PyDict_GetItem(assignment, key)  # an int key: no error to miss
                    value = default if found == NULL else <object>found
                else:
                    value = get_replicas(key, default)
            if value is not last_replicas:
                if value is None:
                    raise ValueError(f"partition entry {i}: None for the non-nullable array replica_nodes")
                replicas = _fast_sequence(value, "replica_nodes", i)
                offline.len = 0
                _put_offline(&offline, replicas, live, live_is_set, i, compact)
                last_replicas = value
            _reserve(&o, 14)
            _be16(o.data + o.len, <uint32_t>error_code)
            _be32(o.data + o.len + 2, <uint32_t>i)
            _be32(o.data + o.len + 6, <uint32_t>leader)
            o.len += 10
            if version >= 7:
                _be32(o.data + o.len, <uint32_t>epoch)
                o.len += 4
            _put_nodes(&o, replicas, "replica_nodes", i, compact)
            _put_nodes(&o, isr, "isr_nodes", i, compact)
            if version >= 5:
                _reserve(&o, offline.len)
                memcpy(o.data + o.len, offline.data, <size_t>offline.len)
                o.len += offline.len
            if compact:
                _reserve(&o, 1)
                o.data[o.len] = 0
                o.len += 1
        return PyBytes_FromStringAndSize(<const char*>o.data, o.len)
    finally:
        PyMem_Free(o.data)
        PyMem_Free(offline.data)
