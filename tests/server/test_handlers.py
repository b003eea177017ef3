"""Request handlers, driven over a real socket with hand-built requests."""

from __future__ import annotations

import struct
import threading
import time
import zlib

import pytest

from pykfk._core.records import build_batch, iter_records
from pykfk.errors import ErrorCode
from pykfk.protocol import framing
from pykfk.server.dispatch import Registry

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
FIND_COORDINATOR, JOIN_GROUP, SASL_HANDSHAKE, API_VERSIONS = 10, 11, 17, 18
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID, DESCRIBE_CONFIGS, CREATE_PARTITIONS = 19, 20, 22, 32, 37


def create_topic(raw, name, partitions=1, configs=None, version=4, validate_only=False):
    body = {
        "topics": [
            {
                "name": name,
                "num_partitions": partitions,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
            }
        ],
        "timeout_ms": 5000,
        "validate_only": validate_only,
    }
    result = raw.call(CREATE_TOPICS, version, body).topics[0]
    return result.error_code, result.error_message


def produce(raw, topic, partition, records, acks=1, version=7):
    body = {
        "transactional_id": None,
        "acks": acks,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    }
    return raw.call(PRODUCE, version, body).responses[0].partition_responses[0]


def fetch_request(topic, partition, offset, *, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, partition_max_bytes=1 << 20):
    return {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def fetch(raw, topic, partition, offset, version=11, **kw):
    return raw.call(FETCH, version, fetch_request(topic, partition, offset, **kw)).responses[0].partitions[0]


def list_offset(raw, topic, partition, timestamp, version=3):
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": timestamp, "max_num_offsets": 1}]}],
    }
    return raw.call(LIST_OFFSETS, version, body).topics[0].partitions[0]


def metadata(raw, topics, version=5, allow_auto=True):
    body = {"topics": None if topics is None else [{"name": t} for t in topics], "allow_auto_topic_creation": allow_auto}
    return raw.call(METADATA, version, body)


def records_of(data):
    return [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in iter_records(bytes(data))]


# -- ApiVersions ------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_come_from_the_registry(raw, version):
    body = {"client_software_name": "raw", "client_software_version": "1"}
    response = raw.call(API_VERSIONS, version, body)
    assert response.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    expected = {r["api_key"]: (r["min_version"], r["max_version"]) for r in Registry.default().api_versions()}
    assert got == expected
    # Every version from 0 (clients that do not negotiate send fixed old versions, and
    # older librdkafka needs specific low versions in the range) up to what today's
    # clients send.
    assert got[0][0] == got[1][0] == got[3][0] == got[18][0] == 0
    assert got[0][1] >= 7 and got[1][1] >= 11 and got[3][1] >= 5 and got[18][1] == 4


def test_unsupported_api_versions_version_gets_v0_error_and_connection_stays(raw):
    # A version newer than any this broker knows: v4's bytes with the version field raised
    # (request header: size, api key, version, ...).
    frame = bytearray(framing.encode_request(API_VERSIONS, 4, 77, "raw",
                                             {"client_software_name": "raw", "client_software_version": "1"}))
    struct.pack_into(">h", frame, 6, 5)
    raw.sock.sendall(frame)
    correlation_id = 77
    frame = raw.recv_frame()
    got_id, code, count = struct.unpack_from(">ihi", frame)
    assert (got_id, code) == (correlation_id, ErrorCode.UNSUPPORTED_VERSION)
    triples = [struct.unpack_from(">hhh", frame, 10 + 6 * i) for i in range(count)]
    assert (18, 0, 4) in triples
    # Same connection, supported version: answered normally.
    assert raw.call(API_VERSIONS, 3, {"client_software_name": "raw", "client_software_version": "1"}).error_code == 0


# -- Metadata and topic administration --------------------------------------------------


def test_metadata_auto_creates_ready_topics(raw, broker):
    response = metadata(raw, ["fresh"])
    topic = response.topics[0]
    assert topic.error_code == 0
    assert [p.partition_index for p in topic.partitions] == [0]
    assert topic.partitions[0].leader_id == broker.broker.broker_id
    assert response.brokers[0].port == broker.port
    assert response.cluster_id and response.controller_id == broker.broker.broker_id
    assert metadata(raw, ["not-created"], allow_auto=False).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert metadata(raw, ["bad/name"]).topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert [t.name for t in metadata(raw, None).topics] == ["fresh"]


def test_create_topics_validates_like_kafka(raw):
    assert create_topic(raw, "ok", 3) == (0, None)
    assert create_topic(raw, "ok", 3)[0] == ErrorCode.TOPIC_ALREADY_EXISTS
    assert create_topic(raw, "has space")[0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(raw, "x" * 250)[0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(raw, "..")[0] == ErrorCode.INVALID_TOPIC_EXCEPTION
    assert create_topic(raw, "zero", 0)[0] == ErrorCode.INVALID_PARTITIONS
    code, message = create_topic(raw, "bad-config", 1, {"retention.ms": "soon"})
    assert code == ErrorCode.INVALID_CONFIG and "retention.ms" in message
    assert create_topic(raw, "unknown-config", 1, {"retention.hours": "1"})[0] == ErrorCode.INVALID_CONFIG
    assert create_topic(raw, "dry", 2, validate_only=True) == (0, None)
    assert metadata(raw, ["dry"], allow_auto=False).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert create_topic(raw, "defaults", -1) == (0, None)  # v4: broker default count
    body = {
        "topics": [{"name": "rf", "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []}],
        "timeout_ms": 1000,
        "validate_only": False,
    }
    assert raw.call(CREATE_TOPICS, 4, body).topics[0].error_code == ErrorCode.INVALID_REPLICATION_FACTOR


def test_delete_topics_and_create_partitions(raw):
    create_topic(raw, "doomed", 2)
    response = raw.call(DELETE_TOPICS, 3, {"topic_names": ["doomed", "never-was"], "timeout_ms": 5000})
    assert {r.name: r.error_code for r in response.responses} == {
        "doomed": 0,
        "never-was": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert metadata(raw, ["doomed"], allow_auto=False).topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    create_topic(raw, "growing", 2)
    body = {"topics": [{"name": "growing", "count": 5, "assignments": None}], "timeout_ms": 5000, "validate_only": False}
    assert raw.call(CREATE_PARTITIONS, 1, body).results[0].error_code == 0
    assert len(metadata(raw, ["growing"]).topics[0].partitions) == 5
    body["topics"][0]["count"] = 3
    assert raw.call(CREATE_PARTITIONS, 1, body).results[0].error_code == ErrorCode.INVALID_PARTITIONS
    assert produce(raw, "growing", 4, build_batch([(b"k", b"v", 1, [])])).error_code == 0


def test_describe_configs_reports_sources(raw):
    create_topic(raw, "configured", 1, {"retention.ms": "12345"})
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": "configured", "configuration_keys": ["retention.ms", "segment.bytes"]},
            {"resource_type": 4, "resource_name": "0", "configuration_keys": ["num.partitions"]},
            {"resource_type": 2, "resource_name": "missing", "configuration_keys": None},
            # "" is the cluster-wide dynamic default, empty until something is set there
            {"resource_type": 4, "resource_name": "", "configuration_keys": None},
        ],
        "include_synonyms": True,
    }
    results = raw.call(DESCRIBE_CONFIGS, 2, body).results
    topic_configs = {c.name: (c.value, c.config_source) for c in results[0].configs}
    assert topic_configs["retention.ms"] == ("12345", 1)  # DYNAMIC_TOPIC_CONFIG
    assert topic_configs["segment.bytes"][1] == 5  # DEFAULT_CONFIG
    assert {c.name: c.value for c in results[1].configs} == {"num.partitions": "1"}
    assert results[2].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert (results[3].error_code, results[3].configs) == (ErrorCode.NONE, [])


# -- Produce ----------------------------------------------------------------------------


def test_produce_then_fetch_returns_the_batches_unchanged(raw):
    create_topic(raw, "data", 1)
    plain = build_batch([(b"k1", b"v1", 1000, [("h", b"x")]), (None, b"v2", 1001, [])])
    gzip = build_batch([(b"k3", b"v3" * 100, 1002, [])], compression=1)
    first = produce(raw, "data", 0, plain)
    second = produce(raw, "data", 0, gzip)
    assert (first.error_code, first.base_offset) == (0, 0)
    assert (second.error_code, second.base_offset) == (0, 2)
    part = fetch(raw, "data", 0, 0)
    assert part.error_code == 0 and part.high_watermark == 3 and part.last_stable_offset == 3
    data = bytes(part.records)
    # Bytes on the wire are the producer's, except the base offset and the partition
    # leader epoch the broker stamped (a standalone broker leads at epoch 0); the
    # CRC-32C does not cover either, so it still holds.
    second_at = len(plain)
    for batch, at in ((plain, 0), (gzip, second_at)):
        assert data[at + 8 : at + 12] == batch[8:12]  # batch length
        assert struct.unpack_from(">i", data, at + 12)[0] == 0  # partition leader epoch
        assert data[at + 16 : at + len(batch)] == batch[16:]
    assert records_of(data) == [
        (0, b"k1", b"v1", 1000, [("h", b"x")]),
        (1, None, b"v2", 1001, []),
        (2, b"k3", b"v3" * 100, 1002, []),
    ]


def test_produce_errors(raw):
    create_topic(raw, "small", 1, {"max.message.bytes": "200"})
    batch = bytearray(build_batch([(b"k", b"v", 1, [])]))
    assert produce(raw, "nope", 0, bytes(batch), version=7).error_code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    )
    assert produce(raw, "small", 7, bytes(batch)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    corrupt = bytearray(batch)
    corrupt[-1] ^= 0xFF  # inside the CRC-covered range
    assert produce(raw, "small", 0, bytes(corrupt)).error_code == ErrorCode.CORRUPT_MESSAGE
    big = build_batch([(b"k", b"v" * 500, 1, [])])
    assert produce(raw, "small", 0, big).error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert produce(raw, "small", 0, bytes(batch) * 2).error_code == ErrorCode.INVALID_RECORD
    assert produce(raw, "small", 0, bytes(batch), acks=2).error_code == ErrorCode.INVALID_REQUIRED_ACKS
    # Nothing bad was stored; a good batch still goes to offset 0.
    assert produce(raw, "small", 0, bytes(batch)).base_offset == 0


def test_acks_zero_gets_no_response(raw):
    create_topic(raw, "fire", 1)
    body = {
        "transactional_id": None,
        "acks": 0,
        "timeout_ms": 5000,
        "topic_data": [{"name": "fire", "partition_data": [{"index": 0, "records": build_batch([(b"k", b"v", 1, [])])}]}],
    }
    raw.send(PRODUCE, 7, body)
    correlation_id = raw.send(API_VERSIONS, 0, {})
    got, _response = raw.recv(API_VERSIONS, 0)
    assert got == correlation_id  # the produce was never answered
    assert list_offset(raw, "fire", 0, -1).offset == 1


def test_legacy_message_set_is_converted_and_served_both_ways(raw):
    create_topic(raw, "legacy", 1)
    # magic 1 message: offset, size, crc, magic, attributes, timestamp, key, value
    body = struct.pack(">bbq", 1, 0, 5000) + struct.pack(">i", 1) + b"K" + struct.pack(">i", 3) + b"old"
    message = struct.pack(">I", zlib.crc32(body)) + body
    message_set = struct.pack(">qi", 0, len(message)) + message
    assert produce(raw, "legacy", 0, message_set, version=2).error_code == 0
    v2 = fetch(raw, "legacy", 0, 0, version=11)
    assert records_of(v2.records) == [(0, b"K", b"old", 5000, [])]
    old = bytes(fetch(raw, "legacy", 0, 0, version=2).records)
    assert old[16] == 1 and old.endswith(b"old")  # magic 1 message set again
    corrupt = bytearray(message_set)
    corrupt[-1] ^= 1
    assert produce(raw, "legacy", 0, bytes(corrupt), version=2).error_code == ErrorCode.CORRUPT_MESSAGE


# -- Fetch ------------------------------------------------------------------------------


def test_fetch_long_poll_wakes_on_append(raw, broker):
    create_topic(raw, "poll", 1)
    other = raw.connect()

    def produce_later():
        time.sleep(0.3)  # the delay under test: the fetch is parked when the record comes
        produce(other, "poll", 0, build_batch([(b"k", b"late", 1, [])]))

    thread = threading.Thread(target=produce_later)
    started = time.monotonic()
    thread.start()
    part = fetch(raw, "poll", 0, 0, max_wait_ms=10000)
    elapsed = time.monotonic() - started
    thread.join()
    assert records_of(part.records)[0][2] == b"late"
    assert 0.2 < elapsed < 5


def test_fetch_waits_max_wait_when_nothing_arrives(raw):
    create_topic(raw, "quiet", 1)
    started = time.monotonic()
    part = fetch(raw, "quiet", 0, 0, max_wait_ms=300)
    assert time.monotonic() - started >= 0.25
    assert part.error_code == 0 and len(part.records) == 0


def test_fetch_limits_and_errors(raw):
    create_topic(raw, "limits", 2)
    for i in range(5):
        produce(raw, "limits", 0, build_batch([(b"k", bytes(1000), i, [])]))
    produce(raw, "limits", 1, build_batch([(b"k", bytes(1000), 0, [])]))
    # At least one whole batch even when it exceeds partition_max_bytes.
    part = fetch(raw, "limits", 0, 2, partition_max_bytes=10)
    assert [r[0] for r in records_of(part.records)] == [2]
    # max_bytes across partitions: the first batch only.
    request = fetch_request("limits", 0, 0, max_bytes=1500)
    request["topics"][0]["partitions"].append(dict(request["topics"][0]["partitions"][0], partition=1))
    parts = raw.call(FETCH, 11, request).responses[0].partitions
    assert len(records_of(parts[0].records)) == 1 and len(parts[1].records) < 1000
    assert fetch(raw, "limits", 0, 99).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert fetch(raw, "limits", 9, 0).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    part = fetch(raw, "limits", 0, 5)
    assert part.error_code == 0 and part.high_watermark == 5 and len(part.records) == 0


# -- ListOffsets, InitProducerId, groups, SASL ---------------------------------------


def test_list_offsets_earliest_latest_and_by_time(raw):
    create_topic(raw, "times", 1)
    produce(raw, "times", 0, build_batch([(b"a", b"1", 1000, []), (b"b", b"2", 2000, [])]))
    produce(raw, "times", 0, build_batch([(b"c", b"3", 3000, [])]))
    assert list_offset(raw, "times", 0, -2).offset == 0
    assert list_offset(raw, "times", 0, -1).offset == 3
    found = list_offset(raw, "times", 0, 1500)
    assert (found.offset, found.timestamp) == (1, 2000)
    assert list_offset(raw, "times", 0, 2500).offset == 2
    assert list_offset(raw, "times", 0, 9999).offset == -1
    body = {"replica_id": -1, "topics": [{"name": "times", "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 1}]}]}
    assert list(raw.call(LIST_OFFSETS, 0, body).topics[0].partitions[0].old_style_offsets) == [3]


def _old_style_offsets(raw, topic, partition, timestamp, max_num_offsets):
    body = {"replica_id": -1, "topics": [{"name": topic, "partitions": [
        {"partition_index": partition, "timestamp": timestamp, "max_num_offsets": max_num_offsets}]}]}
    answer = raw.call(LIST_OFFSETS, 0, body).topics[0].partitions[0]
    return answer.error_code, list(answer.old_style_offsets)


def test_list_offsets_v0_lists_segment_base_offsets_largest_first(raw):
    # one 1-record batch a segment: the base offsets are 0, 1, 2 and the log end 3
    create_topic(raw, "legacy", 1, configs={"segment.bytes": "100"})
    for i in range(3):
        assert produce(raw, "legacy", 0, build_batch([(b"k", b"%d" % i, 1000 + i, [])])).error_code == 0
    assert _old_style_offsets(raw, "legacy", 0, -1, 10) == (0, [3, 2, 1, 0])
    assert _old_style_offsets(raw, "legacy", 0, -1, 2) == (0, [3, 2])
    assert _old_style_offsets(raw, "legacy", 0, -2, 10) == (0, [0])
    # by the segments' modification times, not the records' timestamps
    future_ms = int(time.time() * 1000) + 3_600_000
    assert _old_style_offsets(raw, "legacy", 0, future_ms, 10) == (0, [3, 2, 1, 0])
    assert _old_style_offsets(raw, "legacy", 0, 1500, 10) == (0, [])  # before any file was written
    assert _old_style_offsets(raw, "legacy", 0, -1, 0) == (0, [])
    assert _old_style_offsets(raw, "legacy", 0, -1, -5) == (0, [])
    assert _old_style_offsets(raw, "legacy", 7, -1, 10) == (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])


def test_init_producer_id_hands_out_fresh_ids(raw):
    body = {"transactional_id": None, "transaction_timeout_ms": 60000}
    ids = [raw.call(INIT_PRODUCER_ID, 1, body) for _ in range(3)]
    assert all(r.error_code == 0 and r.producer_epoch == 0 for r in ids)
    assert len({r.producer_id for r in ids}) == 3


def test_idempotent_duplicate_and_gap(raw):
    create_topic(raw, "idem", 1)
    pid = raw.call(INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000}).producer_id
    first = build_batch([(b"k", b"0", 1, [])], producer_id=pid, producer_epoch=0, base_sequence=0)
    assert produce(raw, "idem", 0, first).base_offset == 0
    retry = produce(raw, "idem", 0, first)
    assert (retry.error_code, retry.base_offset) == (0, 0)  # duplicate: original offset
    gap = build_batch([(b"k", b"5", 1, [])], producer_id=pid, producer_epoch=0, base_sequence=5)
    assert produce(raw, "idem", 0, gap).error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert list_offset(raw, "idem", 0, -1).offset == 1


def test_group_apis_reach_the_coordinator(raw, broker):
    response = raw.call(FIND_COORDINATOR, 1, {"key": "g", "key_type": 0})
    assert (response.error_code, response.node_id, response.port) == (ErrorCode.NONE, 0, broker.port)
    body = {
        "group_id": "g",
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    joined = raw.call(JOIN_GROUP, 5, body)
    # JoinGroup v4+: a new member first gets its id with MEMBER_ID_REQUIRED (KIP-394).
    assert joined.error_code == ErrorCode.MEMBER_ID_REQUIRED and joined.member_id


def test_sasl_handshake_on_a_plaintext_listener(raw):
    # Kafka: a SaslHandshake that reaches the request handlers (no SASL on this
    # listener) is in the wrong state.
    response = raw.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE
    assert list(response.mechanisms) == []


# -- Connection behaviour ---------------------------------------------------------------


def test_pipelined_requests_are_answered_in_order(raw):
    create_topic(raw, "pipe", 1)
    sent = []
    for i in range(60):
        if i % 3 == 0:
            sent.append((FETCH, 11, raw.send(FETCH, 11, fetch_request("pipe", 0, 0, max_wait_ms=50))))
        elif i % 3 == 1:
            sent.append((METADATA, 5, raw.send(METADATA, 5, {"topics": [{"name": "pipe"}], "allow_auto_topic_creation": False})))
        else:
            sent.append((API_VERSIONS, 3, raw.send(API_VERSIONS, 3, {"client_software_name": "a", "client_software_version": "b"})))
    for api_key, version, correlation_id in sent:
        got, _ = raw.recv(api_key, version)
        assert got == correlation_id


def test_unknown_api_key_and_version_close_the_connection(raw):
    raw.sock.sendall(struct.pack(">ihhih", 10, 999, 0, 7, -1))
    assert raw.is_closed_by_peer()
    other = raw.connect()
    other.sock.sendall(struct.pack(">ihhih", 10, PRODUCE, 99, 7, -1))
    assert other.is_closed_by_peer()
    assert raw.connect().call(API_VERSIONS, 0, {}).error_code == 0


def test_idle_connections_are_closed(pykfk_broker_factory):
    from tests.server.conftest import RawClient

    broker = pykfk_broker_factory(connections_max_idle_ms=300)
    client = RawClient(broker.host, broker.port)
    assert client.call(API_VERSIONS, 0, {}).error_code == 0
    started = time.monotonic()
    assert client.is_closed_by_peer(timeout=5)
    assert time.monotonic() - started >= 0.2
    client.close()


def test_large_request_and_response_frames(raw):
    # A 3 MiB batch crosses the large-frame path on the way in and partial sendfile
    # writes on the way out.
    create_topic(raw, "big", 1, {"max.message.bytes": str(8 << 20)})
    value = bytes(range(256)) * (3 * 4096)
    batch = build_batch([(b"k", value, 7, [])])
    assert produce(raw, "big", 0, batch).error_code == 0
    part = fetch(raw, "big", 0, 0, partition_max_bytes=8 << 20, max_bytes=8 << 20)
    assert records_of(part.records) == [(0, b"k", value, 7, [])]
