"""The group coordinator driven directly by simulated members (coroutines calling its API
the way the broker's handlers do), on a ManualClock: session, rebalance, sync and
pending-member timeouts fire when a test advances time, never by waiting."""

from __future__ import annotations

import asyncio

import pytest

from pykfk.clock import ManualClock
from pykfk.errors import ErrorCode as E
from pykfk.group.coordinator import GroupConfig, GroupCoordinator
from pykfk.group.group import GroupState
from pykfk.group.offsets import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from pykfk.group.storage import MemoryOffsetsLog

# Nothing here waits for real time: a test that hangs is a bug, reported quickly.
pytestmark = pytest.mark.timeout(30)

NUM_PARTITIONS = 4
TOPIC_PARTITIONS = {("t", p) for p in range(12)} | {("u", 0)}


def small_config(**overrides) -> GroupConfig:
    values = {
        "group_min_session_timeout_ms": 1,
        "group_max_session_timeout_ms": 60_000,
        "group_initial_rebalance_delay_ms": 0,
        "offsets_topic_num_partitions": NUM_PARTITIONS,
    }
    values.update(overrides)
    return GroupConfig(**values)


async def make_coordinator(config=None, logs=None, clock=None) -> tuple[GroupCoordinator, dict]:
    coordinator = GroupCoordinator(
        config or small_config(),
        partition_exists=lambda topic, partition: (topic, partition) in TOPIC_PARTITIONS,
        clock=clock or ManualClock(),
    )
    await coordinator.start(run_retention=False)
    logs = logs if logs is not None else {p: MemoryOffsetsLog() for p in range(NUM_PARTITIONS)}
    for p, offsets_log in logs.items():
        await coordinator.load_partition(p, offsets_log)
    return coordinator, logs


@pytest.fixture
async def coord():
    coordinator, _ = await make_coordinator()
    yield coordinator
    await coordinator.shutdown()


class Client:
    """One simulated consumer: remembers its member id and generation like a client does."""

    def __init__(self, coord: GroupCoordinator, client_id: str, *, group: str = "g",
                 protocols=(("roundrobin", b"rr"),), session_ms: int = 5000,
                 rebalance_ms: int = 5000, instance_id: str | None = None):
        self.coord, self.client_id, self.group = coord, client_id, group
        self.protocols = [(name, meta) for name, meta in protocols]
        self.session_ms, self.rebalance_ms, self.instance_id = session_ms, rebalance_ms, instance_id
        self.member_id = ""
        self.generation = -1
        self.assignment = None

    async def join(self, **extra) -> dict:
        result = await self.coord.join_group(
            self.group, self.member_id, "consumer", self.protocols,
            session_timeout_ms=self.session_ms, rebalance_timeout_ms=self.rebalance_ms,
            group_instance_id=self.instance_id, client_id=self.client_id,
            client_host="/127.0.0.1", **extra)
        if result["error_code"] == E.NONE:
            self.member_id, self.generation = result["member_id"], result["generation_id"]
        elif result["error_code"] == E.MEMBER_ID_REQUIRED:
            self.member_id = result["member_id"]
        return result

    async def sync(self, assignments=()) -> dict:
        result = await self.coord.sync_group(self.group, self.generation, self.member_id,
                                             assignments, group_instance_id=self.instance_id)
        if result["error_code"] == E.NONE:
            self.assignment = result["assignment"]
        return result

    async def heartbeat(self) -> E:
        result = await self.coord.heartbeat(self.group, self.generation, self.member_id,
                                            self.instance_id)
        return result["error_code"]

    async def commit(self, offsets: dict[tuple[str, int], int], generation=None, member_id=None):
        topics: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append((partition, offset, -1, "meta"))
        result = await self.coord.offset_commit(
            self.group, self.generation if generation is None else generation,
            self.member_id if member_id is None else member_id, list(topics.items()),
            group_instance_id=self.instance_id)
        return {(t["name"], p["partition_index"]): p["error_code"]
                for t in result["topics"] for p in t["partitions"]}


def clock_of(coord: GroupCoordinator) -> ManualClock:
    clock = coord._clock
    assert isinstance(clock, ManualClock)
    return clock


def committed(offset_fetch_result: dict) -> dict:
    """{(topic, partition): (offset, leader epoch, metadata)} of an offset_fetch result."""
    return {(t["name"], p["partition_index"]):
            (p["committed_offset"], p["committed_leader_epoch"], p["metadata"])
            for t in offset_fetch_result["topics"] for p in t["partitions"]}


async def rebalance(clients: list[Client]) -> list[dict]:
    """All clients join concurrently, the leader assigns each member its client id, all sync."""
    joins = await asyncio.gather(*(c.join() for c in clients))
    leader = [j for j in joins if j["members"]]
    assert len(leader) == 1, joins
    plan = [(m["member_id"], m["member_id"].encode()) for m in leader[0]["members"]]
    syncs = await asyncio.gather(*(
        c.sync(plan if j["members"] else ()) for c, j in zip(clients, joins)))
    for c, s in zip(clients, syncs):
        assert s["error_code"] == E.NONE
        assert c.assignment == c.member_id.encode()
    return joins


# -- join / sync / heartbeat ------------------------------------------------------------------


async def test_single_member_join_sync_heartbeat(coord):
    c = Client(coord, "c1")
    join = await c.join()
    assert join["error_code"] == E.NONE
    assert join["generation_id"] == 1
    assert join["member_id"].startswith("c1-") and len(join["member_id"]) == 3 + 36
    assert join["leader"] == join["member_id"]
    assert join["protocol_type"] == "consumer" and join["protocol_name"] == "roundrobin"
    assert join["members"] == [
        {"member_id": c.member_id, "group_instance_id": None, "metadata": b"rr"}]
    assert coord.group("g").state is GroupState.COMPLETING_REBALANCE
    sync = await c.sync([(c.member_id, b"assignment")])
    assert sync == {"error_code": E.NONE, "protocol_type": "consumer",
                    "protocol_name": "roundrobin", "assignment": b"assignment"}
    assert coord.group("g").state is GroupState.STABLE
    assert await c.heartbeat() == E.NONE
    # A follower-style SyncGroup in Stable returns the stored assignment again.
    assert (await c.sync())["assignment"] == b"assignment"


async def test_first_member_leads_and_followers_wait_for_the_assignment(coord):
    c1, c2, c3 = (Client(coord, f"c{i}") for i in (1, 2, 3))
    joins = await asyncio.gather(c1.join(), c2.join(), c3.join())
    assert {j["generation_id"] for j in joins} == {1}
    assert {j["leader"] for j in joins} == {c1.member_id}
    assert len(joins[0]["members"]) == 3 and joins[1]["members"] == joins[2]["members"] == []
    # Followers park in SyncGroup until the leader's assignment arrives.
    followers = asyncio.gather(c2.sync(), c3.sync())
    await clock_of(coord).tick(1000)
    assert not followers.done()
    await c1.sync([(c1.member_id, b"A"), (c2.member_id, b"B")])  # c3 omitted -> empty
    r2, r3 = await followers
    assert (r2["assignment"], r3["assignment"]) == (b"B", b"")
    # The group metadata record carries the assignment.
    described = (await coord.describe_groups(["g"]))["groups"][0]
    assert {m["member_id"]: m["member_assignment"] for m in described["members"]} == {
        c1.member_id: b"A", c2.member_id: b"B", c3.member_id: b""}


async def test_protocol_vote_picks_a_protocol_all_members_support(coord):
    kp1 = Client(coord, "kp1", protocols=[("range", b"r1"), ("roundrobin", b"rr1")])
    kp2 = Client(coord, "kp2", protocols=[("range", b"r2"), ("roundrobin", b"rr2")])
    aio = Client(coord, "aio", protocols=[("roundrobin", b"rr3")])
    joins = await asyncio.gather(kp1.join(), kp2.join(), aio.join())
    assert {j["protocol_name"] for j in joins} == {"roundrobin"}
    leader = next(j for j in joins if j["members"])
    assert sorted(m["metadata"] for m in leader["members"]) == [b"rr1", b"rr2", b"rr3"]


async def test_protocol_vote_majority_preference_wins(coord):
    a = Client(coord, "a", group="v", protocols=[("range", b""), ("roundrobin", b"")])
    b = Client(coord, "b", group="v", protocols=[("range", b""), ("roundrobin", b"")])
    c = Client(coord, "c", group="v", protocols=[("roundrobin", b""), ("range", b"")])
    joins = await asyncio.gather(a.join(), b.join(), c.join())
    assert {j["protocol_name"] for j in joins} == {"range"}


async def test_inconsistent_group_protocol(coord):
    c1 = Client(coord, "c1")
    await rebalance([c1])
    only_range = Client(coord, "c2", protocols=[("range", b"")])
    assert (await only_range.join())["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    other_type = await coord.join_group("g", "", "connect", [("roundrobin", b"")],
                                        session_timeout_ms=5000, client_id="x")
    assert other_type["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    no_protocols = await coord.join_group("new", "", "consumer", [], session_timeout_ms=5000)
    assert no_protocols["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert coord.group("new") is None  # a refused join leaves no group behind
    assert await c1.heartbeat() == E.NONE  # the group is untouched


async def test_initial_rebalance_delay_is_extended_as_members_arrive():
    coord, _ = await make_coordinator(small_config(group_initial_rebalance_delay_ms=100))
    try:
        clients = [Client(coord, f"c{i}", rebalance_ms=5000) for i in range(3)]
        tasks = []
        for c in clients:
            tasks.append(asyncio.create_task(c.join()))
            await clock_of(coord).tick(60)
        # Each arrival within a delay buys one more delay: the last arrival (120 ms) is
        # seen when the delay that began at 200 ms runs out at 300 ms.
        await clock_of(coord).tick(119)
        assert not any(t.done() for t in tasks)
        await clock_of(coord).tick(1)
        joins = await asyncio.gather(*tasks)
        # One rebalance for all three: without the extension the third would have
        # needed a second generation.
        assert {j["generation_id"] for j in joins} == {1}
        assert len(next(j for j in joins if j["members"])["members"]) == 3
    finally:
        await coord.shutdown()


async def test_initial_rebalance_delay_is_capped_by_the_rebalance_timeout():
    coord, _ = await make_coordinator(small_config(group_initial_rebalance_delay_ms=100))
    try:
        first = Client(coord, "first", rebalance_ms=150)
        first_join = asyncio.create_task(first.join())
        stream = []
        for i in range(12):  # a member every 40 ms for ~0.5 s
            stream.append(asyncio.create_task(Client(coord, f"s{i}", rebalance_ms=150).join()))
            await clock_of(coord).tick(40)
            if first_join.done():
                break
        assert first_join.done(), "the join phase must end within the rebalance timeout"
        assert len(first_join.result()["members"]) < 13
        for t in stream:
            t.cancel()
    finally:
        await coord.shutdown()


async def test_join_group_is_never_answered_with_rebalance_in_progress(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    c3 = Client(coord, "c3")
    late = asyncio.create_task(c3.join())
    await clock_of(coord).settle()
    assert not late.done()  # parked until the known members rejoin
    assert await c1.heartbeat() == E.REBALANCE_IN_PROGRESS
    assert await c2.heartbeat() == E.REBALANCE_IN_PROGRESS
    joins = await asyncio.gather(c1.join(), c2.join(), late)
    assert all(j["error_code"] == E.NONE for j in joins)


# -- rebalances ---------------------------------------------------------------------------------


async def test_late_joiner_triggers_rebalance_and_commits_during_preparing_are_kept(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    assert coord.group("g").generation_id == 1
    c3 = Client(coord, "c3")
    late = asyncio.create_task(c3.join())
    await clock_of(coord).settle()
    assert coord.group("g").state is GroupState.PREPARING_REBALANCE
    # The pre-rebalance commit from the current generation is accepted.
    assert await c1.commit({("t", 0): 10, ("t", 1): 11}) == {("t", 0): E.NONE, ("t", 1): E.NONE}
    assert await c1.heartbeat() == E.REBALANCE_IN_PROGRESS
    assert await c2.heartbeat() == E.REBALANCE_IN_PROGRESS
    joins = await asyncio.gather(c1.join(), c2.join(), late)
    assert {j["generation_id"] for j in joins} == {2}
    assert len(next(j for j in joins if j["members"])["members"]) == 3
    fetched = await coord.offset_fetch("g", [("t", [0, 1])])
    assert [p["committed_offset"] for p in fetched["topics"][0]["partitions"]] == [10, 11]


async def test_commit_while_completing_rebalance_is_refused_with_rebalance_in_progress(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await asyncio.gather(c1.join(), c2.join())
    assert coord.group("g").state is GroupState.COMPLETING_REBALANCE
    assert await c2.commit({("t", 0): 1}) == {("t", 0): E.REBALANCE_IN_PROGRESS}
    # Clients heartbeat as soon as they have the JoinGroup answer: that is fine.
    assert await c2.heartbeat() == E.NONE


async def test_member_that_never_sends_sync_group_is_removed():
    coord, _ = await make_coordinator()
    try:
        c1 = Client(coord, "c1", rebalance_ms=150)
        c2 = Client(coord, "c2", rebalance_ms=150)
        await asyncio.gather(c1.join(), c2.join())
        await c1.sync([(c1.member_id, b"a"), (c2.member_id, b"b")])
        # c2 keeps heartbeating but never syncs: after the rebalance timeout it is out.
        for _ in range(20):
            if await c2.heartbeat() != E.NONE:
                break
            await clock_of(coord).tick(20)
        assert await c2.heartbeat() == E.UNKNOWN_MEMBER_ID
        assert await c1.heartbeat() == E.REBALANCE_IN_PROGRESS
        join = await c1.join()
        assert [m["member_id"] for m in join["members"]] == [c1.member_id]
    finally:
        await coord.shutdown()


async def test_session_expiry_expels_member_and_the_rest_get_a_new_generation(coord):
    c1, c2, c3 = (Client(coord, f"c{i}", session_ms=200, rebalance_ms=2000) for i in (1, 2, 3))
    await rebalance([c1, c2, c3])
    seen: dict[str, E] = {}

    # c3 goes silent (kill -9); c1 and c2 keep heartbeating every 30 ms until told to rejoin.
    for _ in range(100):
        for c in (c1, c2):
            if c.client_id not in seen and (error := await c.heartbeat()) != E.NONE:
                seen[c.client_id] = error
        if len(seen) == 2:
            break
        await clock_of(coord).tick(30)
    assert seen == {"c1": E.REBALANCE_IN_PROGRESS, "c2": E.REBALANCE_IN_PROGRESS}
    assert not coord.group("g").has(c3.member_id)
    joins = await rebalance([c1, c2])
    assert {j["generation_id"] for j in joins} == {2}
    assert {m["member_id"] for j in joins for m in j["members"]} == {c1.member_id, c2.member_id}
    # The expelled member finds out when it comes back.
    assert await c3.heartbeat() == E.UNKNOWN_MEMBER_ID


async def test_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(coord):
    c1 = Client(coord, "c1", rebalance_ms=150, session_ms=5000)
    c2 = Client(coord, "c2", rebalance_ms=150, session_ms=5000)
    await rebalance([c1, c2])
    rejoin = asyncio.create_task(c1.join())  # the leader rejoins; c2 never does
    await clock_of(coord).tick(149)
    assert not rejoin.done()
    await clock_of(coord).tick(1)
    joined = await rejoin
    assert joined["generation_id"] == 2
    assert [m["member_id"] for m in joined["members"]] == [c1.member_id]


async def test_leader_leaving_hands_leadership_to_a_remaining_member(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    left = await coord.leave_group("g", [(c1.member_id, None)])
    assert left == {"error_code": E.NONE, "members": [
        {"member_id": c1.member_id, "group_instance_id": None, "error_code": E.NONE}]}
    assert await c2.heartbeat() == E.REBALANCE_IN_PROGRESS
    join = await c2.join()
    assert join["leader"] == c2.member_id and join["generation_id"] == 2


async def test_leave_group_batch_and_unknown_members(coord):
    c1, c2, c3 = (Client(coord, f"c{i}") for i in (1, 2, 3))
    await rebalance([c1, c2, c3])
    result = await coord.leave_group(
        "g", [(c1.member_id, None), ("nobody", None), (c2.member_id, None)])
    assert [m["error_code"] for m in result["members"]] == [E.NONE, E.UNKNOWN_MEMBER_ID, E.NONE]
    assert list(coord.group("g").members) == [c3.member_id]
    unknown_group = await coord.leave_group("no-such-group", [("m", None)])
    assert unknown_group["members"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
    # Last member leaves: the group is Empty with a new generation.
    assert await c3.heartbeat() == E.REBALANCE_IN_PROGRESS
    await coord.leave_group("g", [(c3.member_id, None)])
    await clock_of(coord).settle()
    assert coord.group("g").state is GroupState.EMPTY
    assert coord.group("g").generation_id == 2


# -- errors ---------------------------------------------------------------------------------------


async def test_stale_generation_and_unknown_member_errors(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    assert (await coord.heartbeat("g", 0, c1.member_id))["error_code"] == E.ILLEGAL_GENERATION
    assert (await coord.heartbeat("g", 1, "ghost"))["error_code"] == E.UNKNOWN_MEMBER_ID
    assert (await coord.sync_group("g", 7, c1.member_id))["error_code"] == E.ILLEGAL_GENERATION
    assert (await coord.sync_group("g", 1, "ghost"))["error_code"] == E.UNKNOWN_MEMBER_ID
    assert await c1.commit({("t", 0): 1}, generation=0) == {("t", 0): E.ILLEGAL_GENERATION}
    assert await c1.commit({("t", 0): 1}, member_id="ghost") == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # A known member id for a group that does not exist.
    ghost = await coord.join_group("other", "ghost-1", "consumer", [("roundrobin", b"")],
                                   session_timeout_ms=5000)
    assert ghost["error_code"] == E.UNKNOWN_MEMBER_ID
    assert (await coord.heartbeat("other", 1, "ghost-1"))["error_code"] == E.UNKNOWN_MEMBER_ID
    # A commit for a generation of a group we do not know.
    result = await coord.offset_commit("other", 3, "ghost-1", [("t", [(0, 1, -1, "")])])
    assert result["topics"][0]["partitions"][0]["error_code"] == E.ILLEGAL_GENERATION
    # None of this disturbed the group.
    assert await c1.heartbeat() == E.NONE and await c2.heartbeat() == E.NONE


async def test_invalid_session_timeout_and_group_id(coord):
    too_short = await coord.join_group("g", "", "consumer", [("roundrobin", b"")],
                                       session_timeout_ms=0)
    assert too_short["error_code"] == E.INVALID_SESSION_TIMEOUT
    too_long = await coord.join_group("g", "", "consumer", [("roundrobin", b"")],
                                      session_timeout_ms=60_001)
    assert too_long["error_code"] == E.INVALID_SESSION_TIMEOUT
    empty_id = await coord.join_group("", "", "consumer", [("roundrobin", b"")],
                                      session_timeout_ms=5000)
    assert empty_id["error_code"] == E.INVALID_GROUP_ID
    assert (await coord.heartbeat("", 1, "m"))["error_code"] == E.INVALID_GROUP_ID


async def test_default_session_timeout_window_is_kafkas():
    config = GroupConfig()
    assert config.group_min_session_timeout_ms == 6000
    assert config.group_max_session_timeout_ms == 1_800_000


async def test_huge_metadata_is_refused_and_the_group_keeps_working():
    coord, _ = await make_coordinator(small_config(group_member_metadata_max_bytes=1024))
    try:
        c1 = Client(coord, "c1")
        await rebalance([c1])
        huge = Client(coord, "huge", protocols=[("roundrobin", b"x" * 1025)])
        assert (await huge.join())["error_code"] == E.INVALID_REQUEST
        assert await c1.heartbeat() == E.NONE
        assert list(coord.group("g").members) == [c1.member_id]
        # A leader cannot push an oversized assignment either.
        c1_rejoin = await c1.join()
        assert c1_rejoin["generation_id"] == 2
        assert (await c1.sync([(c1.member_id, b"y" * 1025)]))["error_code"] == E.INVALID_REQUEST
        assert (await c1.sync([(c1.member_id, b"ok")]))["assignment"] == b"ok"
    finally:
        await coord.shutdown()


async def test_group_max_size():
    coord, _ = await make_coordinator(small_config(group_max_size=2))
    try:
        c1, c2 = Client(coord, "c1"), Client(coord, "c2")
        await rebalance([c1, c2])
        assert (await Client(coord, "c3").join())["error_code"] == E.GROUP_MAX_SIZE_REACHED
        assert await c1.heartbeat() == E.NONE
    finally:
        await coord.shutdown()


async def test_member_id_required_then_rejoin_with_the_given_id(coord):
    c = Client(coord, "c1")
    first = await c.join(require_known_member_id=True)
    assert first["error_code"] == E.MEMBER_ID_REQUIRED
    assert first["member_id"].startswith("c1-")
    assert coord.group("g").members == {}
    second = await c.join(require_known_member_id=True)
    assert second["error_code"] == E.NONE
    assert second["member_id"] == first["member_id"] and second["generation_id"] == 1


async def test_pending_member_that_never_returns_expires():
    coord, _ = await make_coordinator()
    try:
        c1 = Client(coord, "c1", session_ms=100)
        await rebalance([c1])
        pending = Client(coord, "p", session_ms=100)
        first = await pending.join(require_known_member_id=True)
        assert first["error_code"] == E.MEMBER_ID_REQUIRED
        assert coord.group("g").pending_members
        await clock_of(coord).tick(99)
        assert coord.group("g").pending_members
        await clock_of(coord).tick(1)
        assert not coord.group("g").pending_members
    finally:
        await coord.shutdown()


async def test_not_coordinator_and_not_available():
    coordinator = GroupCoordinator(small_config())
    result = await coordinator.join_group("g", "", "consumer", [("roundrobin", b"")],
                                          session_timeout_ms=5000)
    assert result["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    await coordinator.start(run_retention=False)
    # No partition loaded: not ours.
    assert not coordinator.owns("g")
    result = await coordinator.join_group("g", "", "consumer", [("roundrobin", b"")],
                                          session_timeout_ms=5000)
    assert result["error_code"] == E.NOT_COORDINATOR
    commit = await coordinator.offset_commit("g", -1, "", [("t", [(0, 1, -1, "")])])
    assert commit["topics"][0]["partitions"][0]["error_code"] == E.NOT_COORDINATOR
    fetch = await coordinator.offset_fetch("g", [("t", [0])])
    assert fetch["error_code"] == E.NOT_COORDINATOR
    assert fetch["topics"][0]["partitions"][0]["error_code"] == E.NOT_COORDINATOR
    await coordinator.load_partition(coordinator.partition_for("g"), MemoryOffsetsLog())
    assert coordinator.owns("g")
    await coordinator.shutdown()


async def test_unload_partition_answers_parked_requests_with_not_coordinator(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    parked = asyncio.create_task(c1.join())  # waits for c2 to rejoin
    await clock_of(coord).settle()
    await coord.unload_partition(coord.partition_for("g"))
    assert (await parked)["error_code"] == E.NOT_COORDINATOR
    assert coord.group("g") is None
    assert await c2.heartbeat() == E.NOT_COORDINATOR


async def test_cancelled_join_does_not_wedge_the_group(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    lost = asyncio.create_task(c1.join())
    await clock_of(coord).settle()
    lost.cancel()  # the client's connection went away
    await asyncio.gather(lost, return_exceptions=True)
    # c2 rejoins; the rebalance completes with both (c1's join still counts, as in Kafka).
    join2 = await asyncio.wait_for(c2.join(), 2)
    assert join2["generation_id"] == 2
    # c1 retries its JoinGroup and gets the current generation.
    join1 = await asyncio.wait_for(c1.join(), 2)
    assert join1["generation_id"] == 2 and join1["members"]


# -- static membership ----------------------------------------------------------------------------


async def test_static_member_restart_replaces_its_id_without_rebalance(coord):
    s1 = Client(coord, "s1", instance_id="instance-1")
    s2 = Client(coord, "s2", instance_id="instance-2")
    await rebalance([s1, s2])
    old_id, old_assignment = s1.member_id, s1.assignment
    group = coord.group("g")
    assert group.leader_id == old_id

    restarted = Client(coord, "s1", instance_id="instance-1")
    join = await restarted.join()
    assert join["error_code"] == E.NONE
    assert join["member_id"] != old_id and join["member_id"].startswith("instance-1-")
    assert join["generation_id"] == 1  # no rebalance
    # The old leader id comes back, so the restarted leader does not try to assign.
    assert join["leader"] == old_id and join["members"] == []
    assert group.state is GroupState.STABLE
    assert await s2.heartbeat() == E.NONE
    # It keeps its assignment; the old incarnation is fenced.
    assert (await restarted.sync())["assignment"] == old_assignment
    assert await s1.heartbeat() == E.FENCED_INSTANCE_ID
    assert await s1.commit({("t", 0): 5}) == {("t", 0): E.FENCED_INSTANCE_ID}
    assert await restarted.commit({("t", 0): 5}) == {("t", 0): E.NONE}


async def test_static_member_with_changed_protocols_triggers_rebalance(coord):
    s1 = Client(coord, "s1", instance_id="i1", protocols=[("range", b""), ("roundrobin", b"")])
    s2 = Client(coord, "s2", instance_id="i2", protocols=[("range", b""), ("roundrobin", b"")])
    await rebalance([s1, s2])
    assert coord.group("g").protocol_name == "range"
    restarted = Client(coord, "s1", instance_id="i1", protocols=[("roundrobin", b"")])
    parked = asyncio.create_task(restarted.join())
    await clock_of(coord).settle()
    assert coord.group("g").state is GroupState.PREPARING_REBALANCE
    assert await s2.heartbeat() == E.REBALANCE_IN_PROGRESS
    joins = await asyncio.gather(parked, s2.join())
    assert {j["protocol_name"] for j in joins} == {"roundrobin"}
    assert {j["generation_id"] for j in joins} == {2}


async def test_static_member_can_leave_by_instance_id(coord):
    s1 = Client(coord, "s1", instance_id="i1")
    s2 = Client(coord, "s2", instance_id="i2")
    await rebalance([s1, s2])
    result = await coord.leave_group("g", [("", "i1"), (s2.member_id, "i2"), ("stale", "i2")])
    assert [m["error_code"] for m in result["members"]] == [E.NONE, E.NONE, E.UNKNOWN_MEMBER_ID]
    assert coord.group("g").members == {}


async def test_known_member_with_someone_elses_instance_id_is_fenced(coord):
    s1 = Client(coord, "s1", instance_id="i1")
    await rebalance([s1])
    impostor = await coord.join_group("g", "other-id", "consumer", [("roundrobin", b"")],
                                      session_timeout_ms=5000, group_instance_id="i1")
    assert impostor["error_code"] == E.FENCED_INSTANCE_ID
    assert (await coord.heartbeat("g", 1, "other-id", "i1"))["error_code"] == E.FENCED_INSTANCE_ID
    # A member id that claims an instance id the group does not know.
    unknown_instance = await coord.heartbeat("g", 1, s1.member_id, "i9")
    assert unknown_instance["error_code"] == E.UNKNOWN_MEMBER_ID
    assert await s1.heartbeat() == E.NONE


async def test_static_member_without_its_member_id_is_not_fenced(coord):
    # librdkafka drops its member id when its session timed out (the coordinator was
    # away) and heartbeats and commits with its instance id alone until it joined again.
    s1 = Client(coord, "s1", instance_id="i1")
    await rebalance([s1])
    assert (await coord.heartbeat("g", 1, "", "i1"))["error_code"] == E.UNKNOWN_MEMBER_ID
    commit = await coord.offset_commit("g", 1, "", [("t", [(0, 5, -1, None)])], group_instance_id="i1")
    assert commit["topics"][0]["partitions"][0]["error_code"] == E.UNKNOWN_MEMBER_ID
    back = await coord.join_group("g", "", "consumer", [("roundrobin", b"")], session_timeout_ms=5000,
                                  group_instance_id="i1")
    assert back["error_code"] == E.NONE and back["generation_id"] == 1  # its place, no rebalance
    assert coord.group("g").static_members == {"i1": back["member_id"]}


# -- offsets ---------------------------------------------------------------------------------------


async def test_simple_commit_and_fetch_all(coord):
    result = await coord.offset_commit("simple", -1, "", [
        ("t", [(0, 100, 3, "m0"), (1, 200, -1, None)]),
        ("u", [(0, 5, -1, "")]),
    ])
    assert all(p["error_code"] == E.NONE for t in result["topics"] for p in t["partitions"])
    everything = await coord.offset_fetch("simple", None)
    assert everything["error_code"] == E.NONE
    assert committed(everything) == {
        ("t", 0): (100, 3, "m0"), ("t", 1): (200, -1, ""), ("u", 0): (5, -1, "")}
    some = await coord.offset_fetch("simple", [("t", [1, 7])])
    assert [p["committed_offset"] for p in some["topics"][0]["partitions"]] == [200, -1]
    unknown = await coord.offset_fetch("nobody", [("t", [0])])
    assert unknown["topics"][0]["partitions"][0]["committed_offset"] == -1
    listed = {g["group_id"]: g for g in (await coord.list_groups())["groups"]}
    assert listed["simple"]["protocol_type"] == "" and listed["simple"]["group_state"] == "Empty"


async def test_simple_commit_is_refused_while_the_group_has_members(coord):
    c1 = Client(coord, "c1")
    await rebalance([c1])
    result = await coord.offset_commit("g", -1, "", [("t", [(0, 1, -1, "")])])
    assert result["topics"][0]["partitions"][0]["error_code"] == E.UNKNOWN_MEMBER_ID


async def test_commit_for_unknown_partitions_and_oversized_metadata(coord):
    result = await coord.offset_commit("simple", -1, "", [
        ("t", [(0, 1, -1, ""), (99, 1, -1, ""), (1, 1, -1, "x" * 4097)]),
        ("missing-topic", [(0, 1, -1, "")]),
    ])
    codes = {(t["name"], p["partition_index"]): p["error_code"]
             for t in result["topics"] for p in t["partitions"]}
    assert codes == {("t", 0): E.NONE, ("t", 99): E.UNKNOWN_TOPIC_OR_PARTITION,
                     ("t", 1): E.OFFSET_METADATA_TOO_LARGE,
                     ("missing-topic", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    fetched = await coord.offset_fetch("simple", None)
    assert list(committed(fetched)) == [("t", 0)]


async def test_offsets_are_written_with_kafkas_record_layouts():
    coord, logs = await make_coordinator()
    try:
        c1 = Client(coord, "c1")
        await rebalance([c1])
        assert await c1.commit({("t", 3): 42}) == {("t", 3): E.NONE}
        records = logs[coord.partition_for("g")].records
        decoded = [(decode_key(k), v) for k, v in records]
        group_records = [decode_group_metadata_value(v)
                         for k, v in decoded if isinstance(k, GroupMetadataKey)]
        assert group_records[-1].generation == 1
        assert group_records[-1].members[0].member_id == c1.member_id
        assert group_records[-1].members[0].assignment == c1.member_id.encode()
        offset_records = [(k, decode_offset_commit_value(v))
                          for k, v in decoded if isinstance(k, OffsetCommitKey)]
        assert offset_records[-1][0] == OffsetCommitKey("g", "t", 3)
        assert offset_records[-1][1].offset == 42 and offset_records[-1][1].metadata == "meta"
        # Nothing for this group landed in another partition.
        for p, offsets_log in logs.items():
            if p != coord.partition_for("g"):
                assert offsets_log.records == []
    finally:
        await coord.shutdown()


async def test_failed_write_is_reported_and_not_applied():
    coord, logs = await make_coordinator()
    try:
        logs[coord.partition_for("s")].fail_with = OSError(5, "I/O error")
        result = await coord.offset_commit("s", -1, "", [("t", [(0, 1, -1, "")])])
        assert result["topics"][0]["partitions"][0]["error_code"] == E.NOT_COORDINATOR
        assert committed(await coord.offset_fetch("s", [("t", [0])]))[("t", 0)][0] == -1
        logs[coord.partition_for("s")].fail_with = None
        result = await coord.offset_commit("s", -1, "", [("t", [(0, 1, -1, "")])])
        assert result["topics"][0]["partitions"][0]["error_code"] == E.NONE
    finally:
        await coord.shutdown()


async def test_groups_and_offsets_survive_a_reload():
    coord, logs = await make_coordinator()
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    await c1.commit({("t", 0): 7, ("t", 1): 8})
    await c1.commit({("t", 0): 9})  # last value wins
    await coord.offset_commit("simple", -1, "", [("u", [(0, 3, -1, "")])])
    await coord.shutdown()

    again, _ = await make_coordinator(logs=logs)
    try:
        group = again.group("g")
        assert group.state is GroupState.STABLE and group.generation_id == 1
        assert list(group.members) == [c1.member_id, c2.member_id]
        assert group.leader_id == c1.member_id
        # Members carry on with their ids and generation after the broker restart.
        for c in (c1, c2):
            c.coord = again
            assert await c.heartbeat() == E.NONE
            assert (await c.sync())["assignment"] == c.member_id.encode()
        fetched = await again.offset_fetch("g", [("t", [0, 1])])
        assert [p["committed_offset"] for p in fetched["topics"][0]["partitions"]] == [9, 8]
        assert committed(await again.offset_fetch("simple", None)) == {("u", 0): (3, -1, "")}
    finally:
        await again.shutdown()


async def test_loaded_members_that_never_heartbeat_are_expelled():
    coord, logs = await make_coordinator()
    c1 = Client(coord, "c1", session_ms=100)
    await rebalance([c1])
    await coord.shutdown()
    again, _ = await make_coordinator(logs=logs)
    try:
        await clock_of(again).tick(99)
        assert again.group("g").members != {}
        await clock_of(again).tick(1)
        assert again.group("g").members == {}
        assert again.group("g").state is GroupState.EMPTY
    finally:
        await again.shutdown()


# -- ListGroups / DescribeGroups / DeleteGroups -----------------------------------------------


async def test_list_and_describe_groups(coord):
    c1, c2 = Client(coord, "c1"), Client(coord, "c2")
    await rebalance([c1, c2])
    await coord.offset_commit("simple", -1, "", [("t", [(0, 1, -1, "")])])
    listed = await coord.list_groups()
    assert listed["error_code"] == E.NONE
    assert {(g["group_id"], g["protocol_type"], g["group_state"]) for g in listed["groups"]} == {
        ("g", "consumer", "Stable"), ("simple", "", "Empty")}
    stable_only = await coord.list_groups(["stable"])
    assert [g["group_id"] for g in stable_only["groups"]] == ["g"]

    described = await coord.describe_groups(["g", "nope"])
    g, nope = described["groups"]
    assert (g["error_code"], g["group_state"], g["protocol_type"], g["protocol_data"]) == (
        E.NONE, "Stable", "consumer", "roundrobin")
    fields = ("member_id", "client_id", "client_host", "member_metadata", "member_assignment")
    assert [tuple(m[f] for f in fields) for m in g["members"]] == [
        (c1.member_id, "c1", "/127.0.0.1", b"rr", c1.member_id.encode()),
        (c2.member_id, "c2", "/127.0.0.1", b"rr", c2.member_id.encode())]
    assert (nope["error_code"], nope["group_state"], nope["members"]) == (E.NONE, "Dead", [])
    v6 = (await coord.describe_groups(["nope"], unknown_as_error=True))["groups"][0]
    assert v6["error_code"] == E.GROUP_ID_NOT_FOUND


async def test_delete_groups():
    coord, logs = await make_coordinator()
    try:
        c1 = Client(coord, "c1")
        await rebalance([c1])
        await c1.commit({("t", 0): 5})
        await coord.offset_commit("simple", -1, "", [("t", [(1, 6, -1, "")])])
        result = await coord.delete_groups(["g", "simple", "nope"])
        assert result == {"results": [
            {"group_id": "g", "error_code": E.NON_EMPTY_GROUP},
            {"group_id": "simple", "error_code": E.NONE},
            {"group_id": "nope", "error_code": E.GROUP_ID_NOT_FOUND}]}
        assert coord.group("simple") is None
        assert (await coord.offset_fetch("simple", None))["topics"] == []
        # After the last member leaves, the consumer group can be deleted too.
        await coord.leave_group("g", [(c1.member_id, None)])
        assert (await coord.delete_groups(["g"]))["results"][0]["error_code"] == E.NONE
        # Tombstones reached the log: a reload finds neither group.
        await coord.shutdown()
        again, _ = await make_coordinator(logs=logs)
        assert again.group("g") is None and again.group("simple") is None
        await again.shutdown()
    finally:
        await coord.shutdown()


# -- retention ---------------------------------------------------------------------------------


async def test_offset_retention_for_empty_and_simple_groups():
    clock = ManualClock()
    hour = 3_600_000
    # The active member's session outlasts the test: it stays a member while hours pass.
    config = small_config(offsets_retention_minutes=60, group_max_session_timeout_ms=1000 * hour)
    coord, logs = await make_coordinator(config, clock=clock)
    try:
        await coord.offset_commit("simple", -1, "", [("t", [(0, 1, -1, "")])])
        active = Client(coord, "a", group="active", session_ms=500 * hour)
        gone = Client(coord, "b", group="left")
        await rebalance([active])
        await rebalance([gone])
        await active.commit({("t", 0): 10})
        await gone.commit({("t", 0): 20})
        await gone.heartbeat()
        clock.advance(hour // 2 - 1000)  # "b" heartbeats within its 5 s session
        await gone.heartbeat()
        clock.advance(1000)
        await coord.leave_group("left", [(gone.member_id, None)])  # empty from now on
        await clock.settle()

        clock.advance(hour // 2)  # simple: 1 h after its commit -> expires; "left": only 30 min empty
        assert await coord.expire_offsets() == 1
        assert coord.group("simple") is None
        assert coord.group("left").offsets

        clock.advance(hour // 2)  # "left" has now been empty for an hour
        assert await coord.expire_offsets() == 1
        assert coord.group("left") is None
        # The active group keeps its offsets however old they are.
        clock.advance(100 * hour)
        assert await active.heartbeat() == E.NONE
        assert await coord.expire_offsets() == 0
        assert coord.group("active").offsets[("t", 0)].offset == 10

        # Tombstones: after a reload the expired groups stay gone.
        await coord.shutdown()
        again, _ = await make_coordinator(config, logs=logs, clock=clock)
        assert again.group("simple") is None and again.group("left") is None
        assert again.group("active").offsets[("t", 0)].offset == 10
        await again.shutdown()
    finally:
        await coord.shutdown()


async def test_explicit_retention_time_from_offset_commit_v2():
    clock = ManualClock()
    coord, _ = await make_coordinator(clock=clock)
    try:
        await coord.offset_commit("s", -1, "", [("t", [(0, 1, -1, "")])], retention_time_ms=1000)
        clock.advance(999)
        assert await coord.expire_offsets() == 0
        clock.advance(1)
        assert await coord.expire_offsets() == 1
    finally:
        await coord.shutdown()


async def test_retention_task_runs_periodically():
    clock = ManualClock()
    coord = GroupCoordinator(
        small_config(offsets_retention_minutes=1, offsets_retention_check_interval_ms=20),
        clock=clock)
    await coord.start()
    try:
        for p in range(NUM_PARTITIONS):
            await coord.load_partition(p, MemoryOffsetsLog())
        await coord.offset_commit("s", -1, "", [("t", [(0, 1, -1, "")])])
        await clock.tick(59_990)  # the check runs every 20 ms: not expired yet
        assert coord.group("s") is not None
        for _ in range(3):  # the next checks find it one minute old
            await clock.tick(20)
        assert coord.group("s") is None
    finally:
        await coord.shutdown()


def test_group_config_from_kafka_properties():
    config = GroupConfig.from_properties({
        "group.min.session.timeout.ms": "1000", "group.max.size": 10,
        "offsets.retention.minutes": "5", "unrelated.key": "x",
    })
    assert config.group_min_session_timeout_ms == 1000
    assert config.group_max_size == 10
    assert config.offsets_retention_ms == 300_000
    assert config.offsets_topic_num_partitions == 50


async def test_heartbeats_keep_a_session_and_it_ends_one_timeout_after_the_last(coord):
    c1 = Client(coord, "c1", session_ms=300)
    await rebalance([c1])
    clock = clock_of(coord)
    for _ in range(5):  # 1.25 s of 250 ms heartbeats: more than four session timeouts
        await clock.tick(250)
        assert await c1.heartbeat() == E.NONE
    await clock.tick(299)
    assert coord.group("g").has(c1.member_id)
    await clock.tick(1)
    assert not coord.group("g").has(c1.member_id)
    assert await c1.heartbeat() == E.UNKNOWN_MEMBER_ID
