"""Frames and headers: requests framed by kafka-python's own encoders decode with our
framing and codec; our response frames (header v0/v1, the ApiVersions quirks, records
passed as FileRegion) decode with kafka-python's response decoders."""

from __future__ import annotations

import os
import struct

import pytest
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from pykfk.protocol import (
    API_SPECS,
    FileRegion,
    ProtocolError,
    decode_request,
    decode_request_header,
    decode_response,
    encode_api_versions_fallback,
    encode_request,
    encode_response,
    response_header_size,
)
from pykfk.protocol.framing import FrameSplitter


def _frame(kp_request, version: int, correlation_id: int = 7) -> memoryview:
    kp_request.with_header(correlation_id=correlation_id, client_id="golden-client")
    data = kp_request.encode(version=version, header=True, framed=True)
    [frame] = FrameSplitter().feed(data)
    return frame


def _materialize(chunks: list) -> bytes:
    """The bytes a connection would send: FileRegions read from their files."""
    out = bytearray()
    for chunk in chunks:
        if type(chunk) is FileRegion:
            out += os.pread(chunk.fd, chunk.size, chunk.position)
        else:
            out += chunk
    return bytes(out)


# ---------------------------------------------------------------- requests in


@pytest.mark.parametrize("version", [3, 7, 8, 9])
def test_produce_request_from_kafka_python(version):
    topic = ProduceRequest.TopicProduceData
    part = topic.PartitionProduceData
    request = ProduceRequest(
        transactional_id="tx-1",
        acks=-1,
        timeout_ms=30000,
        topic_data=[
            topic(
                name="orders",
                partition_data=[part(index=0, records=b"batch-0"), part(index=3, records=None)],
            ),
            topic(name="päyments", partition_data=[]),
        ],
    )
    header, body = decode_request(_frame(request, version))
    assert header == (0, version, 7, "golden-client")
    assert body.transactional_id == "tx-1"
    assert (body.acks, body.timeout_ms) == (-1, 30000)
    orders, payments = body.topic_data
    assert orders.name == "orders" and payments.name == "päyments"
    first, second = orders.partition_data
    assert first.index == 0 and isinstance(first.records, memoryview)
    assert bytes(first.records) == b"batch-0"
    assert second.index == 3 and second.records is None


def test_produce_records_are_views_into_the_frame():
    topic = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        acks=1,
        timeout_ms=1,
        topic_data=[
            topic(
                name="t", partition_data=[topic.PartitionProduceData(index=0, records=b"\x00" * 64)]
            )
        ],
    )
    frame = _frame(request, 7)
    _, offset = decode_request_header(frame)
    body = API_SPECS[0].decode_request(frame, offset, 7)
    records = body.topic_data[0].partition_data[0].records
    records[0] = 0x55  # writable, shared with the frame: no copy was made
    assert 0x55 in bytes(frame)
    assert records.obj is frame.obj


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_fetch_request_from_kafka_python(version):
    topic = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=1,
        session_id=0,
        session_epoch=-1,
        topics=[
            topic(
                topic="t",
                partitions=[
                    topic.FetchPartition(
                        partition=2,
                        current_leader_epoch=-1,
                        fetch_offset=42,
                        log_start_offset=-1,
                        partition_max_bytes=1048576,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    header, body = decode_request(_frame(request, version))
    assert header.api_key == 1 and header.api_version == version
    assert body.max_wait_ms == 500 and body.isolation_level == 1
    [part] = body.topics[0].partitions
    assert (part.partition, part.fetch_offset, part.partition_max_bytes) == (2, 42, 1048576)


@pytest.mark.parametrize("version", [0, 1, 4, 5, 8, 9])
def test_metadata_request_from_kafka_python(version):
    request = MetadataRequest(
        topics=[
            MetadataRequest.MetadataRequestTopic(name="a"),
            MetadataRequest.MetadataRequestTopic(name="b"),
        ],
        allow_auto_topic_creation=True,
    )
    _, body = decode_request(_frame(request, version))
    assert [t.name for t in body.topics] == ["a", "b"]
    assert body.allow_auto_topic_creation is True


def test_metadata_request_null_topics_means_all():
    _, body = decode_request(
        _frame(MetadataRequest(topics=None, allow_auto_topic_creation=False), 5)
    )
    assert body.topics is None


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_request_from_kafka_python(version):
    request = ApiVersionsRequest(
        client_software_name="kafka-python", client_software_version="3.0.12"
    )
    header, body = decode_request(_frame(request, version))
    assert header.api_version == version and header.client_id == "golden-client"
    if version >= 3:
        assert (body.client_software_name, body.client_software_version) == (
            "kafka-python",
            "3.0.12",
        )


@pytest.mark.parametrize("version", [2, 5, 7])
def test_join_group_request_from_kafka_python(version):
    request = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
    )
    _, body = decode_request(_frame(request, version))
    assert (body.group_id, body.session_timeout_ms, body.rebalance_timeout_ms) == (
        "g",
        45000,
        300000,
    )
    assert [(p.name, p.metadata) for p in body.protocols] == [("range", b"\x00\x01")]
    assert type(body.protocols[0].metadata) is bytes  # stored by the coordinator: a copy


@pytest.mark.parametrize("version", [2, 3, 7, 8])
def test_offset_commit_request_from_kafka_python(version):
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest(
        group_id="g",
        generation_id_or_member_epoch=3,
        member_id="m-1",
        retention_time_ms=-1,
        topics=[
            topic(
                name="t",
                partitions=[
                    topic.OffsetCommitRequestPartition(
                        partition_index=1, committed_offset=99, committed_metadata="meta"
                    )
                ],
            )
        ],
    )
    _, body = decode_request(_frame(request, version))
    assert body.generation_id_or_member_epoch == 3 and body.member_id == "m-1"
    [part] = body.topics[0].partitions
    assert (part.partition_index, part.committed_offset, part.committed_metadata) == (1, 99, "meta")


@pytest.mark.parametrize("version", [2, 4, 5])
def test_create_topics_request_from_kafka_python(version):
    topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        topics=[
            topic(
                name="new",
                num_partitions=3,
                replication_factor=1,
                assignments=[],
                configs=[topic.CreatableTopicConfig(name="cleanup.policy", value="compact")],
            )
        ],
        timeout_ms=1000,
        validate_only=False,
    )
    _, body = decode_request(_frame(request, version))
    [created] = body.topics
    assert (created.name, created.num_partitions, created.replication_factor) == ("new", 3, 1)
    assert [(c.name, c.value) for c in created.configs] == [("cleanup.policy", "compact")]


# ---------------------------------------------------------------- responses out


def _kp_decode(kp_cls, chunks, version):
    return kp_cls.decode(_materialize(chunks), version=version, header=True, framed=True)


@pytest.mark.parametrize("version", [0, 2, 5, 7, 8, 9])
def test_produce_response_decodes_in_kafka_python(version):
    body = {
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {
                        "index": 0,
                        "error_code": 0,
                        "base_offset": 1234,
                        "log_append_time_ms": -1,
                        "log_start_offset": 0,
                    }
                ],
            }
        ],
        "throttle_time_ms": 0,
    }
    resp = _kp_decode(ProduceResponse, encode_response(0, version, 11, body), version)
    assert resp.header.correlation_id == 11
    [part] = resp.responses[0].partition_responses
    assert (part.index, part.error_code, part.base_offset) == (0, 0, 1234)


@pytest.mark.parametrize("version", [4, 7, 11, 12])
def test_fetch_response_with_file_region_decodes_in_kafka_python(tmp_path, version):
    payload = b"R" * 70000  # larger than a socket buffer write, passed by reference
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"head" + payload + b"tail")
    fd = os.open(path, os.O_RDONLY)
    try:
        region = FileRegion(fd, 4, len(payload))
        body = {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": 0,
                            "high_watermark": 10,
                            "last_stable_offset": 10,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": region,
                        },
                        {
                            "partition_index": 1,
                            "error_code": 1,
                            "high_watermark": 5,
                            "records": b"small",
                        },
                        {
                            "partition_index": 2,
                            "error_code": 0,
                            "high_watermark": 0,
                            "records": None,
                        },
                    ],
                }
            ],
        }
        chunks = encode_response(1, version, 21, body)
        # size prefix first, FileRegion passed through, bytes on both sides of it
        assert [type(c) for c in chunks] == [bytes, FileRegion, bytes]
        assert chunks[1] is region
        (size,) = struct.unpack_from(">i", chunks[0])
        assert size == len(chunks[0]) - 4 + region.size + len(chunks[2])
        resp = _kp_decode(FetchResponse, chunks, version)
    finally:
        os.close(fd)
    assert resp.header.correlation_id == 21
    parts = resp.responses[0].partitions
    assert [p.partition_index for p in parts] == [0, 1, 2]
    assert parts[0].high_watermark == 10
    assert bytes(parts[0].records) == payload
    assert bytes(parts[1].records) == b"small"
    assert parts[2].records in (None, b"")


def test_records_list_and_large_buffers_are_not_copied():
    big = memoryview(bytearray(b"x" * 40000))
    body = {
        "responses": [
            {"topic": "t", "partitions": [{"records": [b"abc", big, FileRegion(3, 0, 10), b"def"]}]}
        ]
    }
    chunks = encode_response(1, 11, 1, body)
    kinds = [type(c) for c in chunks]
    assert kinds == [bytes, memoryview, FileRegion, bytes]
    assert chunks[1] is big
    assert chunks[0].endswith(b"abc") and chunks[3].startswith(b"def")
    (size,) = struct.unpack_from(">i", chunks[0])
    assert size == sum(c.size if type(c) is FileRegion else len(c) for c in chunks) - 4
    # records length prefix counts every part
    assert struct.unpack_from(">i", chunks[0], len(chunks[0]) - 3 - 4)[0] == 3 + 40000 + 10 + 3


@pytest.mark.parametrize("version", [0, 1, 4, 5, 7, 9])
def test_metadata_response_decodes_in_kafka_python(version):
    body = {
        "brokers": [{"node_id": 1, "host": "127.0.0.1", "port": 9092, "rack": None}],
        "cluster_id": "c-1",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "is_internal": False,
                "partitions": [
                    {
                        "error_code": 0,
                        "partition_index": 0,
                        "leader_id": 1,
                        "leader_epoch": 0,
                        "replica_nodes": [1],
                        "isr_nodes": [1],
                        "offline_replicas": [],
                    }
                ],
            }
        ],
    }
    resp = _kp_decode(MetadataResponse, encode_response(3, version, 5, body), version)
    assert resp.brokers[0].host == "127.0.0.1" and resp.brokers[0].port == 9092
    [part] = resp.topics[0].partitions
    assert part.leader_id == 1 and part.replica_nodes == [1]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_header_is_always_v0(version):
    body = {
        "error_code": 0,
        "api_keys": [
            {"api_key": k, "min_version": s.min_version, "max_version": s.max_version}
            for k, s in API_SPECS.items()
        ],
        "throttle_time_ms": 0,
    }
    chunks = encode_response(18, version, 99, body)
    assert response_header_size(18, version) == 4
    # correlation id is followed directly by the int16 error code, no tagged-field byte
    assert chunks[0][4:10] == struct.pack(">ih", 99, 0)
    resp = _kp_decode(ApiVersionsResponse, chunks, version)
    assert resp.header.correlation_id == 99
    assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == {
        k: (s.min_version, s.max_version) for k, s in API_SPECS.items()
    }


def test_api_versions_fallback_is_read_by_kafka_python():
    frame = encode_api_versions_fallback(3, {18: (0, 3), 0: (3, 7)})
    resp = ApiVersionsResponse.decode(frame, version=4, header=True, framed=True)
    assert resp.header.correlation_id == 3
    assert resp.error_code == 35
    assert {(k.api_key, k.min_version, k.max_version) for k in resp.api_keys} == {
        (18, 0, 3),
        (0, 3, 7),
    }
    assert encode_api_versions_fallback(3, [(0, 3, 7), (18, 0, 3)]) == frame


def test_unsupported_api_versions_request_header_still_parses():
    # A v5 request (newer than declared) still yields its correlation id for the fallback.
    frame = struct.pack(">hhih", 18, 5, 77, 2) + b"cl" + b"\x00" + b"\x02x\x021\x00"
    header, offset = decode_request_header(frame)
    assert header == (18, 5, 77, "cl") and offset == 13


@pytest.mark.parametrize("version", [0, 2, 5, 6, 7])
def test_join_group_response_decodes_in_kafka_python(version):
    body = {
        "error_code": 0,
        "generation_id": 1,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "leader": "m-1",
        "member_id": "m-1",
        "members": [{"member_id": "m-1", "group_instance_id": None, "metadata": b"\x00\x03"}],
    }
    resp = _kp_decode(JoinGroupResponse, encode_response(11, version, 8, body), version)
    assert (resp.generation_id, resp.leader, resp.member_id) == (1, "m-1", "m-1")
    assert resp.members[0].metadata == b"\x00\x03"


@pytest.mark.parametrize("version", [2, 3, 8])
def test_offset_commit_response_decodes_in_kafka_python(version):
    body = {"topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 27}]}]}
    resp = _kp_decode(OffsetCommitResponse, encode_response(8, version, 2, body), version)
    assert resp.topics[0].partitions[0].error_code == 27


@pytest.mark.parametrize("version", [2, 4, 5])
def test_create_topics_response_decodes_in_kafka_python(version):
    body = {"topics": [{"name": "new", "error_code": 36, "error_message": "exists"}]}
    resp = _kp_decode(CreateTopicsResponse, encode_response(19, version, 4, body), version)
    assert (resp.topics[0].name, resp.topics[0].error_code) == ("new", 36)


# ---------------------------------------------------------------- headers and frames


def test_request_header_v2_skips_tagged_fields():
    frame = encode_request(
        18, 3, 5, None, {"client_software_name": "n", "client_software_version": "v"}
    )
    [view] = FrameSplitter().feed(frame)
    header, offset = decode_request_header(view)
    assert header == (18, 3, 5, None)
    assert offset == 11  # 10 fixed bytes with a null client id + 1 tagged-field count


def test_response_header_v1_for_flexible_versions():
    assert response_header_size(0, 8) == 4
    assert response_header_size(0, 9) == 5
    chunks = encode_response(0, 9, 1, {"responses": []})
    assert chunks[0][8] == 0  # empty tagged-field section of header v1
    assert decode_response(0, 9, chunks[0][4:])[0] == 1


def test_client_round_trip_helpers():
    frame = encode_request(12, 3, 42, "me", {"group_id": "g", "generation_id": 2, "member_id": "m"})
    header, body = decode_request(frame[4:])
    assert header == (12, 3, 42, "me")
    assert body.group_instance_id is None and body.generation_id == 2


def test_frame_splitter_handles_partial_and_multiple_frames():
    a = encode_request(12, 0, 1, "c", {"group_id": "g"})
    b = encode_request(12, 0, 2, "c", {"group_id": "h"})
    splitter = FrameSplitter()
    assert splitter.feed(a[:3]) == []
    frames = splitter.feed(a[3:] + b[:-1])
    assert [decode_request(f)[0].correlation_id for f in frames] == [1]
    frames = splitter.feed(b[-1:])
    assert [decode_request(f)[0].correlation_id for f in frames] == [2]
    assert splitter.buffered == 0


@pytest.mark.parametrize("size", [-1, 101])
def test_frame_splitter_rejects_bad_sizes_before_buffering(size):
    with pytest.raises(ProtocolError):
        FrameSplitter(max_frame_size=100).feed(struct.pack(">i", size))
