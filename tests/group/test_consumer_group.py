"""The consumer group protocol (KIP-848) in the coordinator, driven by simulated members
on a ManualClock: assignors, epoch-based reconciliation, fencing, sessions, regular
expressions, storage in __consumer_offsets and reload. Nothing here waits for real time."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from pykfk.clock import ManualClock
from pykfk.errors import ErrorCode as E
from pykfk.group import api
from pykfk.group.assignors import MemberSpec, TopicSpec, range_assignor, uniform
from pykfk.group.consumer_group import ConsumerGroupConfig, Heartbeat
from pykfk.group.coordinator import GroupConfig, GroupCoordinator
from pykfk.group.reconciliation import (
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    reconcile,
    update_member,
)
from pykfk.group.storage import MemoryOffsetsLog
from pykfk.protocol.types import Struct

pytestmark = pytest.mark.timeout(30)

NUM_PARTITIONS = 2
T = uuid.UUID(int=1)
U = uuid.UUID(int=2)


class Catalog:
    """Topics by name as the broker's handler gives them: (id, partitions)."""

    def __init__(self, **topics: tuple[uuid.UUID, int]):
        self.version = 0
        self._topics = dict(topics)

    def topics(self):
        return self._topics

    def add(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        self._topics[name] = (topic_id, partitions)
        self.version += 1


async def make(clock=None, logs=None, **consumer):
    config = GroupConfig(offsets_topic_num_partitions=NUM_PARTITIONS, consumer=ConsumerGroupConfig(**consumer))
    coordinator = GroupCoordinator(config, clock=clock or ManualClock())
    await coordinator.start(run_retention=False)
    logs = logs if logs is not None else {p: MemoryOffsetsLog() for p in range(NUM_PARTITIONS)}
    for p, offsets_log in logs.items():
        await coordinator.load_partition(p, offsets_log)
    return coordinator, logs


def beat(member_id, epoch, *, topics=None, regex=None, owned=None, group="g", **kw) -> Heartbeat:
    join = epoch == 0
    return Heartbeat(group, member_id, epoch, subscribed_topic_names=topics if topics is not None or not join or regex
                     else ["t"], subscribed_topic_regex=regex, rebalance_timeout_ms=30_000 if join else -1,
                     owned=owned, **kw)


def parts(response, topic=T) -> set[int]:
    for tp in response["assignment"]["topic_partitions"]:
        if tp["topic_id"] == topic:
            return set(tp["partitions"])
    return set()


# -- assignors -------------------------------------------------------------------------------------


def test_uniform_balances_and_keeps_what_it_can():
    topics = {T: TopicSpec("t", 12)}
    first = uniform({m: MemberSpec(frozenset({T})) for m in "abc"}, topics)
    assert sorted(len(a[T]) for a in first.values()) == [4, 4, 4]
    # d joins: each old member gives up exactly one partition, keeps the rest.
    specs = {m: MemberSpec(frozenset({T}), first[m]) for m in "abc"}
    specs["d"] = MemberSpec(frozenset({T}))
    second = uniform(specs, topics)
    assert sorted(len(a.get(T, ())) for a in second.values()) == [3, 3, 3, 3]
    for m in "abc":
        assert second[m][T] <= first[m][T]
    # b leaves: its partitions go to the others, nobody else moves.
    third = uniform({m: MemberSpec(frozenset({T}), second[m]) for m in "acd"}, topics)
    for m in "acd":
        assert second[m][T] <= third[m][T]
    assert set().union(*(a[T] for a in third.values())) == set(range(12))


def test_uniform_with_different_subscriptions():
    topics = {T: TopicSpec("t", 4), U: TopicSpec("u", 4)}
    result = uniform({"a": MemberSpec(frozenset({T})), "b": MemberSpec(frozenset({T, U}))}, topics)
    assert result["a"][T] | result["b"].get(T, frozenset()) == set(range(4))
    assert result["b"][U] == set(range(4)) and U not in result["a"]


def test_range_gives_contiguous_ranges_per_topic():
    topics = {T: TopicSpec("t", 7), U: TopicSpec("u", 7)}
    result = range_assignor({m: MemberSpec(frozenset({T, U})) for m in "abc"}, topics)
    assert result["a"][T] == {0, 1, 2} and result["b"][T] == {3, 4} and result["c"][T] == {5, 6}
    assert result["a"][U] == result["a"][T]


# -- reconciliation ---------------------------------------------------------------------------------


def test_reconciliation_revokes_first_then_assigns_released_partitions():
    group = ConsumerGroup("g", group_epoch=2, assignment_epoch=2)
    a = ConsumerMember("a", member_epoch=1, assigned={T: frozenset({0, 1, 2, 3})})
    b = ConsumerMember("b", member_epoch=0)
    update_member(group, a)
    update_member(group, b)
    group.target = {"a": {T: frozenset({0, 1})}, "b": {T: frozenset({2, 3})}}
    # b may not take 2 and 3 while a still holds them: it gets its epoch, nothing else.
    b = reconcile(group, b, None)
    assert b.state == MemberState.UNRELEASED_PARTITIONS and b.member_epoch == 2 and not b.assigned
    update_member(group, b)
    # a keeps 0 and 1 (it never stops consuming them) and must give up 2 and 3 first.
    a = reconcile(group, a, {T: frozenset({0, 1, 2, 3})})
    assert a.state == MemberState.UNREVOKED_PARTITIONS and a.member_epoch == 1
    assert a.assigned == {T: frozenset({0, 1})} and a.pending_revocation == {T: frozenset({2, 3})}
    update_member(group, a)
    assert reconcile(group, a, None) is a  # nothing said about what it owns: still revoking
    a = reconcile(group, a, {T: frozenset({0, 1})})  # revoked
    assert a.state == MemberState.STABLE and a.member_epoch == 2 and a.previous_member_epoch == 1
    update_member(group, a)
    b = reconcile(group, b, {})
    assert b.state == MemberState.STABLE and b.assigned == {T: frozenset({2, 3})}


# -- the coordinator --------------------------------------------------------------------------------


async def test_members_join_split_the_topic_and_reach_a_stable_group():
    coordinator, _ = await make()
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 12))
    a = await groups.heartbeat(beat("a", 0), catalog)
    assert a["error_code"] == E.NONE and a["member_epoch"] == 1 and parts(a) == set(range(12))
    b = await groups.heartbeat(beat("b", 0), catalog)
    assert b["member_epoch"] == 2 and parts(b) == set()  # a still holds everything
    a = await groups.heartbeat(beat("a", 1, owned={T: frozenset(range(12))}), catalog)
    kept = parts(a)
    assert len(kept) == 6 and a["member_epoch"] == 1  # revoke first, epoch unchanged
    a = await groups.heartbeat(beat("a", 1, owned={T: frozenset(kept)}), catalog)
    assert a["member_epoch"] == 2
    b = await groups.heartbeat(beat("b", 2), catalog)
    assert parts(b) == set(range(12)) - kept
    assert groups.get("g").state.value == "Stable"
    described = groups.describe("g", {T: "t"})
    assert described["group_epoch"] == 2 and {m["member_id"] for m in described["members"]} == {"a", "b"}
    listed = await api.list_groups(coordinator, 5, Struct(states_filter=[], types_filter=["consumer"]))
    assert listed["groups"] == [{"group_id": "g", "protocol_type": "consumer", "group_state": "Stable",
                                 "group_type": "consumer"}]
    await coordinator.shutdown()


async def test_stale_epochs_unknown_members_and_bad_requests_get_kafkas_errors():
    coordinator, _ = await make(subscription_max_bytes=64)
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 4))
    await groups.heartbeat(beat("a", 0), catalog)
    await groups.heartbeat(beat("b", 0), catalog)
    assert (await groups.heartbeat(beat("a", 7), catalog))["error_code"] == E.FENCED_MEMBER_EPOCH
    assert (await groups.heartbeat(beat("zz", 1), catalog))["error_code"] == E.UNKNOWN_MEMBER_ID
    assert (await groups.heartbeat(beat("a", -3), catalog))["error_code"] == E.INVALID_REQUEST
    assert (await groups.heartbeat(beat("", 0), catalog))["error_code"] == E.INVALID_REQUEST
    huge = await groups.heartbeat(beat("c", 0, topics=[f"topic-{i}" for i in range(20)]), catalog)
    assert huge["error_code"] == E.INVALID_REQUEST and "subscription" in huge["error_message"]
    bad_regex = await groups.heartbeat(beat("c", 0, regex="(unclosed"), catalog)
    assert bad_regex["error_code"] == E.INVALID_REGULAR_EXPRESSION
    assert (await groups.heartbeat(beat("c", 0, server_assignor="sticky"), catalog))["error_code"] == \
        E.UNSUPPORTED_ASSIGNOR
    # The group and its members carry on.
    assert set(groups.get("g").members) == {"a", "b"}
    ok = await groups.heartbeat(beat("b", 2), catalog)
    assert ok["error_code"] == E.NONE
    await coordinator.shutdown()


async def test_a_silent_member_is_fenced_and_its_partitions_move():
    clock = ManualClock()
    coordinator, _ = await make(clock, session_timeout_ms=10_000)
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 4))
    await groups.heartbeat(beat("a", 0), catalog)
    a = await groups.heartbeat(beat("a", 1, owned={T: frozenset(range(4))}), catalog)
    await groups.heartbeat(beat("b", 0), catalog)
    a = await groups.heartbeat(beat("a", 1, owned={T: frozenset(range(4))}), catalog)
    await groups.heartbeat(beat("a", 1, owned={T: frozenset(parts(a))}), catalog)
    b = await groups.heartbeat(beat("b", 2, owned={}), catalog)
    assert len(parts(b)) == 2
    epoch, owned = 2, set()
    for _ in range(3):  # a keeps heartbeating, b goes quiet
        clock.advance(4_000)
        await clock.settle()
        a = await groups.heartbeat(beat("a", epoch), catalog)
        epoch = a["member_epoch"]
        owned = parts(a) if a["assignment"] is not None else owned
    assert set(groups.get("g").members) == {"a"}
    assert (await groups.heartbeat(beat("b", 2), catalog))["error_code"] == E.UNKNOWN_MEMBER_ID
    assert owned == set(range(4)) and epoch == 3
    await coordinator.shutdown()


async def test_a_member_that_does_not_revoke_in_time_is_fenced():
    clock = ManualClock()
    coordinator, _ = await make(clock)
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 4))
    await groups.heartbeat(beat("a", 0), catalog)
    await groups.heartbeat(beat("b", 0), catalog)
    await groups.heartbeat(beat("a", 1, owned={T: frozenset(range(4))}), catalog)
    assert groups.get("g").members["a"].state == MemberState.UNREVOKED_PARTITIONS
    clock.advance(31_000)  # past a's rebalance timeout (30 s), within its session
    await clock.settle()
    assert set(groups.get("g").members) == {"b"}
    await coordinator.shutdown()


async def _resolved() -> None:
    """Let the regular expressions' resolution (a task of its own) run and store."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_regex_subscription_picks_up_a_new_topic():
    coordinator, _ = await make()
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 2), other=(uuid.UUID(int=9), 2))
    a = await groups.heartbeat(beat("a", 0, topics=None, regex="t.*"), catalog)
    # Kafka's order: the heartbeat that brings a regular expression is answered before it
    # is resolved; its matches come in the next group epoch.
    assert a["member_epoch"] == 1 and not a["assignment"]["topic_partitions"]
    await _resolved()
    a = await groups.heartbeat(beat("a", 1), catalog)
    assert a["member_epoch"] == 2 and parts(a) == {0, 1} and len(a["assignment"]["topic_partitions"]) == 1
    catalog.add("tz", U, 3)
    a = await groups.heartbeat(beat("a", 2), catalog)
    assert a["member_epoch"] == 2 and a["assignment"] is None  # resolving again
    await _resolved()
    a = await groups.heartbeat(beat("a", 2), catalog)
    assert a["member_epoch"] == 3 and parts(a, U) == {0, 1, 2} and parts(a, T) == {0, 1}
    await coordinator.shutdown()


async def test_named_topics_are_assigned_before_the_regex_matches():
    coordinator, logs = await make()
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 2), u1=(U, 2))
    a = await groups.heartbeat(beat("a", 0, topics=["t"], regex="u.*"), catalog)
    assert a["member_epoch"] == 1 and parts(a) == {0, 1} and parts(a, U) == set()
    await _resolved()
    assert groups.get("g").group_epoch == 2 and groups.get("g").resolved_regexes == {"u.*": frozenset({"u1"})}
    a = await groups.heartbeat(beat("a", 1), catalog)
    assert a["member_epoch"] == 2 and parts(a) == {0, 1} and parts(a, U) == {0, 1}
    # A coordinator that loads the group knows what the regex matched: no epoch change.
    await coordinator.shutdown()
    again, _ = await make(logs=logs)
    reloaded = again.consumer_groups
    a = await reloaded.heartbeat(beat("a", 2), catalog)
    assert a["error_code"] == E.NONE and a["member_epoch"] == 2
    await _resolved()
    assert reloaded.get("g").group_epoch == 2
    await again.shutdown()


async def test_a_regex_matches_only_topics_the_member_may_describe():
    coordinator, _ = await make()
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 2), u1=(U, 2))
    await groups.heartbeat(beat("a", 0, topics=[], regex=".*", may_describe=lambda name: name != "u1"), catalog)
    await _resolved()
    a = await groups.heartbeat(beat("a", 1), catalog)
    assert parts(a) == {0, 1} and parts(a, U) == set()
    await coordinator.shutdown()


async def test_commits_need_the_current_member_epoch():
    coordinator, _ = await make()
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 2))
    await groups.heartbeat(beat("a", 0), catalog)

    async def commit(member_id, epoch, version=9):
        request = Struct(group_id="g", generation_id_or_member_epoch=epoch, member_id=member_id,
                         group_instance_id=None, topics=[Struct(name="t", partitions=[Struct(
                             partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                             committed_metadata="")])])
        return (await api.offset_commit(coordinator, version, request))["topics"][0]["partitions"][0]["error_code"]

    assert await commit("a", 1) == E.NONE
    assert await commit("a", 0) == E.STALE_MEMBER_EPOCH
    assert await commit("x", 1) == E.UNKNOWN_MEMBER_ID
    assert await commit("a", 1, version=8) == E.UNSUPPORTED_VERSION
    fetched = await coordinator.offset_fetch("g", [("t", [0])])
    assert fetched["topics"][0]["partitions"][0]["committed_offset"] == 5
    described = await api.describe_groups(coordinator, 6, Struct(groups=["g"], include_authorized_operations=False))
    assert described["groups"][0]["error_code"] == E.GROUP_ID_NOT_FOUND
    await coordinator.shutdown()


async def test_a_new_coordinator_reloads_groups_from_the_log():
    coordinator, logs = await make()
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 4))
    await groups.heartbeat(beat("a", 0), catalog)
    await groups.heartbeat(beat("b", 0), catalog)
    a = await groups.heartbeat(beat("a", 1, owned={T: frozenset(range(4))}), catalog)
    before = groups.get("g")
    await coordinator.shutdown()

    again, _ = await make(logs=logs)
    after = again.consumer_groups.get("g")
    assert (after.group_epoch, after.assignment_epoch, after.target) == \
        (before.group_epoch, before.assignment_epoch, before.target)
    assert after.members["a"].pending_revocation == before.members["a"].pending_revocation
    assert after.members["a"].assigned == {T: frozenset(parts(a))}
    # The members carry on where they were, with their epochs.
    a = await again.consumer_groups.heartbeat(beat("a", 1, owned={T: frozenset(parts(a))}), catalog)
    assert a["error_code"] == E.NONE and a["member_epoch"] == 2
    await again.shutdown()


async def test_a_static_member_comes_back_without_a_rebalance():
    coordinator, _ = await make()
    groups, catalog = coordinator.consumer_groups, Catalog(t=(T, 2))
    first = await groups.heartbeat(beat("a", 0, instance_id="i1"), catalog)
    epoch = groups.get("g").group_epoch
    assert (await groups.heartbeat(beat("a", -2, instance_id="i1"), catalog))["error_code"] == E.NONE
    taken = await groups.heartbeat(beat("x", 0, instance_id="i1"), catalog)
    assert taken["error_code"] == E.NONE and parts(taken) == parts(first)
    assert groups.get("g").group_epoch == epoch and set(groups.get("g").members) == {"x"}
    clash = await groups.heartbeat(beat("y", 0, instance_id="i1"), catalog)
    assert clash["error_code"] == E.UNRELEASED_INSTANCE_ID
    await coordinator.shutdown()
