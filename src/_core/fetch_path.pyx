# cython: language_level=3
"""The Fetch handler's work per partition, compiled: the read limits (high watermark,
last stable offset for read_committed), the byte budget of the response, the segment
read through the log, the pinned FileRegion the answer sends with sendfile (record bytes
are never copied; down-converted for v0-3), the aborted transactions, and the answer's
dicts as the response encoder takes them.

The core imports nothing of the broker: the handler hands in the exception its reads
raise (``KafkaError``, with a ``code``), the error codes, and the rack-aware replica
selector (``configure``). The log and the replica manager are called through their
Python methods (``log_for_fetch``, ``Log.read``), so their rules stay in one place.
"""

from uuid import UUID

from pykfk._core.records import to_legacy
from pykfk._core.regions import FileRegion

cdef object _ZERO_UUID = UUID(int=0)

cdef object _KafkaError = None
cdef object _preferred = None
cdef object _AUTHORIZATION_FAILED = 29
cdef object _OUT_OF_RANGE = 1
cdef object _NONE = 0
cdef long long INT32_MAX = 2**31 - 1


def configure(kafka_error, preferred_read_replica, none_code, authorization_failed_code, out_of_range_code):
    """The broker's pieces the core must not import: the exception class whose ``code``
    a failed read answers, ``preferred_read_replica(ctx, topic, partition, rack)`` (KIP-392),
    and the error codes (ErrorCode members, so answers hold the same values as before)."""
    global _KafkaError, _preferred, _NONE, _AUTHORIZATION_FAILED, _OUT_OF_RANGE
    _KafkaError = kafka_error
    _preferred = preferred_read_replica
    _NONE = none_code
    _AUTHORIZATION_FAILED = authorization_failed_code
    _OUT_OF_RANGE = out_of_range_code


cdef dict _error(object partition, object code):
    return {"partition_index": partition, "error_code": code, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}


def partition_error(partition, code):
    """A partition's answer carrying only ``code``."""
    return _error(partition, code)


cdef object _failed(object replicas, object topic, object partition, object code):
    stats = replicas.topic_stats.for_topic(topic)
    stats.failed_fetch_requests += 1
    return _error(partition, code)


cdef object _owned(object ctx, object region, int version):
    """The records an answer sends: the region pinned (its descriptor held until the
    answer is sent) or None when its segment closed since the read; v0-3: the batches
    down-converted to the message sets those versions read."""
    if version < 4:
        return to_legacy(region.read(), 0 if version < 2 else 1)
    try:
        pinned = region.pinned()
    except ValueError:
        return None  # the segment closed since the read (deleted): the next fetch rereads
    ctx.pinned.append(pinned)
    return pinned


cdef tuple _read_partition(object ctx, object replicas, int version, object topic, object part, int replica_id,
                           long long remaining, bint first, bint first_pass, bint read_committed, object client_rack):
    cdef object partition = part.partition
    cdef long long fetch_offset = part.fetch_offset
    cdef bint error = False
    cdef long long limit, size = 0, high_watermark, max_offset, log_start
    try:
        plog, read_limit = replicas.log_for_fetch(
            topic, partition, replica_id, fetch_offset, part.current_leader_epoch,
            report_position=first_pass, consumer_on_follower=version >= 11)
    except _KafkaError as exc:
        return _failed(replicas, topic, partition, exc.code), 0, True
    max_offset = read_limit
    # A consumer's read limit is the high watermark already; a follower's the end.
    high_watermark = max_offset if replica_id < 0 else plog.high_watermark
    if replica_id >= 0 and part.high_watermark < high_watermark:
        error = True  # KIP-1166: tell the follower now (v18+; older: never)
    if client_rack is not None:
        preferred = _preferred(ctx, topic, partition, client_rack)
        if preferred >= 0:  # KIP-392: read from the replica in the client's rack
            answer = _error(partition, _NONE)
            answer["high_watermark"] = high_watermark
            answer["last_stable_offset"] = plog.last_stable_offset
            answer["log_start_offset"] = plog.log_start_offset
            answer["preferred_read_replica"] = preferred
            return answer, 0, error
    last_stable = plog.last_stable_offset
    if read_committed:
        max_offset = last_stable
    limit = part.partition_max_bytes
    if limit > remaining:
        limit = remaining
    records = b""
    region = None
    try:
        if fetch_offset == max_offset and plog.log_start_offset <= max_offset:
            # Nothing new (a caught-up follower or consumer): no segment lookup.
            log_start = plog.log_start_offset
        elif limit > 0 or first:
            # Only the first partition with data may exceed the limits (one whole batch);
            # later ones are cut, and clients drop a partial last batch.
            data = plog.read(fetch_offset, limit if limit > 0 else 0, max_offset=max_offset, min_one_message=first)
            region = data.file_region
            log_start = data.log_start_offset
        else:
            log_start = plog.log_start_offset
            # Past the read limit but not the log end (a new leader's high watermark
            # still catching up): nothing to read, not out of range.
            if not log_start <= fetch_offset <= plog.log_end_offset:
                return _failed(replicas, topic, partition, _OUT_OF_RANGE), 0, True
    except _KafkaError as exc:
        return _failed(replicas, topic, partition, exc.code), 0, True
    if region is not None:
        size = region.size
        if size > 0:
            records = _owned(ctx, region, version)
        else:
            size = 0
    aborted = None
    if read_committed and region is not None and len(plog.aborted_txns):
        aborted = [{"producer_id": txn.producer_id, "first_offset": txn.first_offset}
                   for txn in plog.aborted_transactions(fetch_offset, max_offset)] or None
    return {"partition_index": partition, "error_code": _NONE, "high_watermark": high_watermark,
            "last_stable_offset": last_stable, "log_start_offset": log_start, "aborted_transactions": aborted,
            "preferred_read_replica": -1, "records": records}, size, error


def read_partition(ctx, topic, part, int replica_id, long long remaining, bint first, bint first_pass,
                   bint read_committed, client_rack):
    """One partition's answer, the record bytes it holds, and whether it must be sent at
    once (an error, or a v18 follower behind the high watermark). ``remaining``: the
    response's byte budget left; ``first``: no partition before it has data (so its first
    batch is sent whole whatever the limits)."""
    return _read_partition(ctx, ctx.broker.replica_manager, ctx.api_version, topic, part, replica_id, remaining,
                           first, first_pass, read_committed, client_rack)


def read_all(ctx, topics, int replica_id, long long max_bytes, bint first_pass, denied, bint read_committed,
             client_rack, known_as):
    """One pass over the requested partitions: (responses, bytes available, answer now:
    an error, or a v18 follower behind the leader's high watermark). Each topic's answer
    carries its ``topic_id`` from ``known_as`` when given (Fetch v13+)."""
    cdef int version = ctx.api_version
    cdef long long remaining = max_bytes if version >= 3 else INT32_MAX
    cdef long long total = 0, size
    cdef bint error = False
    cdef list responses = []
    cdef list partitions
    cdef dict entry
    replicas = ctx.broker.replica_manager
    for topic in topics:
        name = topic.topic
        if denied and name in denied:
            partitions = [_error(part.partition, _AUTHORIZATION_FAILED) for part in topic.partitions]
            error = True
        else:
            partitions = []
            for part in topic.partitions:
                answer, size, failed = _read_partition(ctx, replicas, version, name, part, replica_id, remaining,
                                                       total == 0, first_pass, read_committed, client_rack)
                partitions.append(answer)
                if size:
                    total += size
                    remaining -= size
                if failed:
                    error = True
        entry = {"topic": name, "partitions": partitions}
        if known_as is not None:
            entry["topic_id"] = known_as.get(name, _ZERO_UUID)
        responses.append(entry)
    return responses, total, error


def count_bytes_out(stats, list responses, bint replication):
    """Per topic, the record bytes of the answer (once per partition, never per record)."""
    cdef long long sent
    for topic in responses:
        sent = 0
        for part in topic["partitions"]:
            records = part["records"]
            if records:
                # Records the reads put in an answer: a FileRegion or bytes (never a list).
                sent += records.size if type(records) is FileRegion else len(records)
        if sent:
            topic_stats = stats.for_topic(topic["topic"])
            if replication:
                topic_stats.replication_bytes_out += sent
            else:
                topic_stats.bytes_out += sent


def session_answer(partitions, list responses, bint incremental):
    """An answer of an incremental fetch session (KIP-227): remembers in each partition's
    session state (``partitions``: (topic, partition) -> state with ``sent_high_watermark``,
    ``sent_last_stable_offset``, ``sent_log_start_offset``) what its answer told the
    client; an ``incremental`` answer keeps only the partitions with news: records, an
    error, or offsets other than those last sent. Topics left without partitions go."""
    cdef list out = []
    cdef list kept
    cdef bint news
    cdef dict entry
    for topic in responses:
        name = topic["topic"]
        kept = []
        for answer in topic["partitions"]:
            state = partitions.get((name, answer["partition_index"]))
            if state is None:
                news = True
            else:
                high_watermark = answer["high_watermark"]
                last_stable = answer["last_stable_offset"]
                log_start = answer["log_start_offset"]
                news = (answer["error_code"] != 0 or bool(answer["records"])
                        or high_watermark != state.sent_high_watermark
                        or last_stable != state.sent_last_stable_offset
                        or log_start != state.sent_log_start_offset)
                state.sent_high_watermark = high_watermark
                state.sent_last_stable_offset = last_stable
                state.sent_log_start_offset = log_start
            if news or not incremental:
                kept.append(answer)
        if kept:
            entry = dict(topic)
            entry["partitions"] = kept
            out.append(entry)
    return out
