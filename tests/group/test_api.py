"""The request -> coordinator -> response glue (pykfk.group.api) at every version the
protocol tables declare: requests are encoded and decoded as the server does, responses
must encode for that version and read back with the expected values."""

from __future__ import annotations

import asyncio

import pytest

from pykfk.errors import ErrorCode as E
from pykfk.group import api
from pykfk.group.coordinator import GroupConfig, GroupCoordinator
from pykfk.group.storage import MemoryOffsetsLog
from pykfk.protocol import messages as protocol

API_SPECS = protocol.API_SPECS

PARTITIONS = 2


def versions(api_key: int) -> range:
    spec = API_SPECS[api_key]
    return range(spec.min_version, spec.max_version + 1)


def request(api_key: int, version: int, body: dict):
    """Encode a request body and decode it back, as the server hands it to a handler."""
    spec = API_SPECS[api_key]
    return spec.decode_request(memoryview(spec.encode_request(body, version)), 0, version)


def response(api_key: int, version: int, body: dict):
    """Encode a response body for ``version`` and read it back."""
    spec = API_SPECS[api_key]
    data = b"".join(bytes(chunk) for chunk in spec.encode_response(body, version))
    return spec.decode_response(memoryview(data), 0, version)


@pytest.fixture
async def coord():
    coordinator = GroupCoordinator(
        GroupConfig(group_min_session_timeout_ms=1, group_initial_rebalance_delay_ms=0,
                    offsets_topic_num_partitions=PARTITIONS),
        partition_exists=lambda topic, partition: topic == "t" and 0 <= partition < 4)
    await coordinator.start(run_retention=False)
    for p in range(PARTITIONS):
        await coordinator.load_partition(p, MemoryOffsetsLog())
    yield coordinator
    await coordinator.shutdown()


async def join(coord, version: int, group: str, member_id: str = "", instance=None):
    body = {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"sub"}]}
    result = await api.join_group(coord, version, request(11, version, body),
                                  client_id="cli", client_host="/127.0.0.1")
    return response(11, version, result)


@pytest.mark.parametrize("version", versions(11))
async def test_join_sync_heartbeat_leave_at_every_version(coord, version):
    group = f"g{version}"
    first = await join(coord, version, group)
    if version >= 4:
        assert first.error_code == E.MEMBER_ID_REQUIRED
        first = await join(coord, version, group, first.member_id)
    assert first.error_code == E.NONE
    assert first.generation_id == 1 and first.leader == first.member_id
    assert first.protocol_name == "range"
    assert [m.metadata for m in first.members] == [b"sub"]
    member_id = first.member_id

    sync_version = min(version, API_SPECS[14].max_version)
    sync = await api.sync_group(coord, sync_version, request(14, sync_version, {
        "group_id": group, "generation_id": 1, "member_id": member_id,
        "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": member_id, "assignment": b"asg"}]}))
    sync = response(14, sync_version, sync)
    assert (sync.error_code, sync.assignment) == (E.NONE, b"asg")

    hb_version = min(version, API_SPECS[12].max_version)
    hb = await api.heartbeat(coord, hb_version, request(12, hb_version, {
        "group_id": group, "generation_id": 1, "member_id": member_id}))
    assert response(12, hb_version, hb).error_code == E.NONE

    leave_version = min(version, API_SPECS[13].max_version)
    body = ({"group_id": group, "member_id": member_id} if leave_version < 3 else
            {"group_id": group, "members": [{"member_id": member_id}, {"member_id": "nobody"}]})
    left = response(13, leave_version, await api.leave_group(coord, leave_version,
                                                             request(13, leave_version, body)))
    assert left.error_code == E.NONE
    if leave_version >= 3:
        assert [m.error_code for m in left.members] == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert coord.group(group).members == {}


@pytest.mark.parametrize("version", versions(13))
async def test_leave_group_error_of_a_single_member_is_top_level_before_v3(coord, version):
    await join(coord, 1, "lg")
    body = ({"group_id": "lg", "member_id": "nobody"} if version < 3 else
            {"group_id": "lg", "members": [{"member_id": "nobody"}]})
    left = response(13, version, await api.leave_group(coord, version, request(13, version, body)))
    if version < 3:
        assert left.error_code == E.UNKNOWN_MEMBER_ID
    else:
        assert left.error_code == E.NONE and left.members[0].error_code == E.UNKNOWN_MEMBER_ID


async def fetch_offsets(coord, version: int, group: str, topics, **member):
    """OffsetFetch of one group at ``version`` (v8+ in the groups batch): (group-level
    error, topics)."""
    if version < 8:
        fetched = response(9, version, await api.offset_fetch(coord, version, request(
            9, version, {"group_id": group, "topics": topics})))
        return fetched.error_code, fetched.topics
    fetched = response(9, version, await api.offset_fetch(coord, version, request(
        9, version, {"groups": [{"group_id": group, "topics": topics, **member}]})))
    assert [g.group_id for g in fetched.groups] == [group]
    return fetched.groups[0].error_code, fetched.groups[0].topics


@pytest.mark.parametrize("version", versions(8))
async def test_offset_commit_and_fetch_at_every_version(coord, version):
    group = f"oc{version}"
    body = {"group_id": group, "generation_id_or_member_epoch": -1, "member_id": "",
            "topics": [{"name": "t", "partitions": [
                {"partition_index": 0, "committed_offset": 10 + version,
                 "committed_leader_epoch": 3, "committed_metadata": "m"},
                {"partition_index": 9, "committed_offset": 1, "committed_metadata": None}]}]}
    result = response(8, version,
                      await api.offset_commit(coord, version, request(8, version, body)))
    codes = [p.error_code for p in result.topics[0].partitions]
    assert codes == [E.NONE, E.UNKNOWN_TOPIC_OR_PARTITION]

    fetch_version = min(version, API_SPECS[9].max_version)
    _, topics = await fetch_offsets(coord, fetch_version, group, [{"name": "t", "partition_indexes": [0, 1]}])
    offsets = [(p.partition_index, p.committed_offset) for p in topics[0].partitions]
    assert offsets == [(0, 10 + version), (1, -1)]
    if fetch_version >= 5:
        assert topics[0].partitions[0].committed_leader_epoch == (3 if version >= 6 else -1)


@pytest.mark.parametrize("version", [v for v in versions(9) if v >= 2])
async def test_offset_fetch_all_and_group_errors(coord, version):
    await coord.offset_commit("all", -1, "", [("t", [(2, 5, -1, "")])])
    _, everything = await fetch_offsets(coord, version, "all", None)
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in everything] == [("t", [5])]
    # A group whose partition is not loaded here: NOT_COORDINATOR at the top level (v8+:
    # the group's).
    await coord.unload_partition(coord.partition_for("all"))
    assert await fetch_offsets(coord, version, "all", None) == (E.NOT_COORDINATOR, [])


@pytest.mark.parametrize("version", versions(9))
async def test_offset_fetch_group_error_per_partition(coord, version):
    await coord.unload_partition(coord.partition_for("x"))
    error, topics = await fetch_offsets(coord, version, "x", [{"name": "t", "partition_indexes": [0]}])
    if version < 2:
        assert topics[0].partitions[0].error_code == E.NOT_COORDINATOR
    else:
        assert error == E.NOT_COORDINATOR


@pytest.mark.parametrize("version", versions(15))
async def test_describe_list_delete_at_every_version(coord, version):
    first = await join(coord, 1, "d")
    await api.sync_group(coord, 0, request(14, 0, {
        "group_id": "d", "generation_id": 1, "member_id": first.member_id,
        "assignments": [{"member_id": first.member_id, "assignment": b"a"}]}))
    describe = request(15, version, {"groups": ["d", "missing"],
                                     "include_authorized_operations": True})
    described = response(15, version, await api.describe_groups(coord, version, describe))
    d, missing = described.groups
    assert (d.error_code, d.group_state, d.protocol_type, d.protocol_data) == (
        E.NONE, "Stable", "consumer", "range")
    assert [(m.member_id, m.client_id, m.client_host, m.member_metadata, m.member_assignment)
            for m in d.members] == [(first.member_id, "cli", "/127.0.0.1", b"sub", b"a")]
    assert missing.group_state == "Dead"
    if version >= 3:
        assert d.authorized_operations == api.GROUP_AUTHORIZED_OPERATIONS

    list_version = min(version, API_SPECS[16].max_version)
    listed = response(16, list_version, await api.list_groups(
        coord, list_version, request(16, list_version, {})))
    assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("d", "consumer")]

    delete_version = min(version, API_SPECS[42].max_version)
    deleted = response(42, delete_version, await api.delete_groups(
        coord, delete_version, request(42, delete_version, {"groups_names": ["d", "missing"]})))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("d", E.NON_EMPTY_GROUP), ("missing", E.GROUP_ID_NOT_FOUND)]


@pytest.mark.parametrize("version", versions(10))
async def test_find_coordinator(coord, version):
    nodes = {p: (0, "127.0.0.1", 9092) for p in range(PARTITIONS)}

    async def answer(key: str, key_type: int, node_for_partition) -> list[tuple]:
        body = {"key": key, "key_type": key_type, "coordinator_keys": [key, key + "-2"]}
        found = response(10, version, await api.find_coordinator(
            coord, version, request(10, version, body), node_for_partition=node_for_partition))
        if version < 4:
            return [(found.error_code, found.node_id, found.host, found.port)]
        return [(c.error_code, c.node_id, c.host, c.port) for c in found.coordinators]

    expected = 1 if version < 4 else 2
    assert await answer("grp", 0, nodes.get) == [(E.NONE, 0, "127.0.0.1", 9092)] * expected
    assert [a[0] for a in await answer("grp", 0, lambda p: None)] == [E.COORDINATOR_NOT_AVAILABLE] * expected
    if version >= 1:
        assert [a[0] for a in await answer("tx", 1, nodes.get)] == [E.COORDINATOR_NOT_AVAILABLE] * expected


async def test_join_parks_until_the_group_completes(coord):
    # Two v1 members (no MEMBER_ID_REQUIRED) join concurrently through the glue.
    a, b = await asyncio.gather(join(coord, 1, "two"), join(coord, 1, "two"))
    assert a.generation_id == b.generation_id == 1
    assert sorted(len(x.members) for x in (a, b)) == [0, 2]
