"""The group coordinator: classic consumer groups and committed offsets.

Mirrors apache/kafka's classic ``GroupCoordinator`` + ``GroupMetadataManager``: JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups and
DeleteGroups, with group state and offsets kept in ``__consumer_offsets`` (see offsets.py).

Loop affinity: every method runs on the broker's event loop; timers use the injected clock;
nothing here blocks or starts threads. A JoinGroup or SyncGroup that must wait for the rest of
the group is a coroutine parked on a future; if the caller is cancelled (the client went away)
the group carries on as Kafka's does when a response goes to a closed socket.

Results are plain dicts whose keys are the response fields' snake_case names (as in the
Kafka message JSON), ready to be merged into a response body. ``error_code`` values are
``pykfk.errors.ErrorCode`` members (IntEnum, so they encode as int16).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.errors import ErrorCode, KafkaError
from pykfk.group.consumer_group import ConsumerGroupConfig, ConsumerGroups
from pykfk.group.consumer_records import is_consumer_group_key
from pykfk.group.group import Group, GroupState, Member
from pykfk.group.offsets import (
    GroupMetadataKey,
    GroupMetadataRecord,
    OffsetAndMetadata,
    OffsetCommitKey,
    OffsetsRecordError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)
from pykfk.group.storage import (
    ABORT_MARKER,
    COMMIT_MARKER,
    TRANSACTIONAL,
    OffsetsLog,
    storage_error_code,
)

log = logging.getLogger("pykfk.group")

E = ErrorCode
Result = dict[str, Any]

# DescribeGroups authorized_operations when the client did not ask (Kafka: Integer.MIN_VALUE).
AUTHORIZED_OPERATIONS_OMITTED = -(1 << 31)
# Records replayed between yields to the loop while loading a partition.
_LOAD_YIELD_EVERY = 1024


@dataclasses.dataclass
class GroupConfig:
    """Coordinator settings; each field is the Kafka broker property in snake_case."""

    # group.min.session.timeout.ms / group.max.session.timeout.ms (Kafka defaults)
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # group.initial.rebalance.delay.ms: wait for more members before the first rebalance
    group_initial_rebalance_delay_ms: int = 3000
    # group.max.size (Kafka default Integer.MAX_VALUE)
    group_max_size: int = 2**31 - 1
    # pykfk: bound on one member's JoinGroup protocol metadata (sum over its protocols) and
    # on one SyncGroup assignment. Kafka has no such check: an oversized group then fails
    # in SyncGroup for everyone when its record exceeds message.max.bytes (~1 MiB).
    group_member_metadata_max_bytes: int = 1 << 20
    # offsets.topic.num.partitions
    offsets_topic_num_partitions: int = 50
    # offsets.retention.minutes (7 days since Kafka 2.0) and its check period
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    # offset.metadata.max.bytes: longer commit metadata gets OFFSET_METADATA_TOO_LARGE
    offset_metadata_max_bytes: int = 4096
    # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs (fixed there): a new member whose
    # JoinGroup is parked longer than this is dropped (it will retry if still alive).
    new_member_join_timeout_ms: int = 300_000
    # group.consumer.*: groups of the consumer protocol (KIP-848, consumer_group.py)
    consumer: ConsumerGroupConfig = dataclasses.field(default_factory=ConsumerGroupConfig)

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> GroupConfig:
        """Build from Kafka property names (``group.max.size`` ...); other keys are ignored,
        missing keys keep their defaults. Values may be ints or strings."""
        names = {
            "group.min.session.timeout.ms": "group_min_session_timeout_ms",
            "group.max.session.timeout.ms": "group_max_session_timeout_ms",
            "group.initial.rebalance.delay.ms": "group_initial_rebalance_delay_ms",
            "group.max.size": "group_max_size",
            "group.member.metadata.max.bytes": "group_member_metadata_max_bytes",
            "offsets.topic.num.partitions": "offsets_topic_num_partitions",
            "offsets.retention.minutes": "offsets_retention_minutes",
            "offsets.retention.check.interval.ms": "offsets_retention_check_interval_ms",
            "offset.metadata.max.bytes": "offset_metadata_max_bytes",
        }
        values = {}
        for prop, field in names.items():
            if prop in props and props[prop] is not None:
                values[field] = int(props[prop])
        return cls(**values, consumer=ConsumerGroupConfig.from_properties(props))


def _join_error(member_id: str, error: ErrorCode) -> Result:
    return {
        "error_code": error,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": "",
        "leader": "",
        "skip_assignment": False,
        "member_id": member_id,
        "members": [],
    }


def _metadata_too_large(metadata: str, max_bytes: int) -> bool:
    """Whether an offset's metadata is over ``offset.metadata.max.bytes`` in UTF-8; a
    string of at most a quarter of that many characters is encoded to no more (UTF-8 is
    at most 4 bytes a character), so only longer ones are encoded to be measured."""
    return len(metadata) * 4 > max_bytes and len(metadata.encode("utf-8")) > max_bytes


def _sync_result(error: ErrorCode, assignment: bytes = b"", group: Group | None = None) -> Result:
    ok = error == E.NONE and group is not None
    return {
        "error_code": error,
        "protocol_type": group.protocol_type if ok else None,  # type: ignore[union-attr]
        "protocol_name": group.protocol_name if ok else None,  # type: ignore[union-attr]
        "assignment": assignment if error == E.NONE else b"",
    }


class GroupCoordinator:
    """Consumer groups and committed offsets for the ``__consumer_offsets`` partitions this
    broker leads.

    Lifecycle: ``await start()``, then ``await load_partition(p, offsets_log)`` for every
    offsets partition this broker leads (all of them on a single broker); on leadership
    loss ``await unload_partition(p)``; ``await shutdown()`` at the end.

    ``partition_exists(topic, partition)`` answers whether a commit target exists
    (UNKNOWN_TOPIC_OR_PARTITION otherwise). ``clock`` (``pykfk.clock``) gives every
    timestamp and runs every timer: session, join, sync and pending-member timeouts and
    the offset expiry loop (tests drive it with a ManualClock).
    """

    def __init__(
        self,
        config: GroupConfig | None = None,
        *,
        partition_exists: Callable[[str, int], bool] = lambda topic, partition: True,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.config = config or GroupConfig()
        self._partition_exists = partition_exists
        self._clock = clock
        self._groups: dict[str, Group] = {}
        self._logs: dict[int, OffsetsLog] = {}
        self._loading: set[int] = set()
        self._active = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._retention_task: asyncio.Task[None] | None = None
        # TxnOffsetCommit offsets waiting for their transaction's marker, by producer id;
        # each (group, topic, partition) -> offset. Invisible to OffsetFetch until then.
        self._pending_txn: dict[int, dict[tuple[str, str, int], OffsetAndMetadata]] = {}
        # The newest epoch each transactional producer committed offsets with: older
        # ones are fenced.
        self._txn_epochs: dict[int, int] = {}
        # Groups of the consumer protocol (KIP-848); their offsets are kept here as well.
        self.consumer_groups = ConsumerGroups(self, self.config.consumer)

    # == lifecycle ============================================================================

    async def start(self, *, run_retention: bool = True) -> None:
        """Bind to the running loop and start the periodic offset expiry task."""
        self._loop = asyncio.get_running_loop()
        self._active = True
        if run_retention and self._retention_task is None:
            self._retention_task = self._loop.create_task(self._retention_loop())

    async def shutdown(self) -> None:
        """Fail parked requests with NOT_COORDINATOR, stop timers, wait for pending writes."""
        self._active = False
        if self._retention_task is not None:
            self._retention_task.cancel()
            await asyncio.gather(self._retention_task, return_exceptions=True)
            self._retention_task = None
        for partition in list(self._logs):
            await self.unload_partition(partition)
        self.consumer_groups.shutdown()
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition that holds this group (FindCoordinator
        answers with that partition's leader)."""
        return partition_for(group_id, self.config.offsets_topic_num_partitions)

    def owns(self, group_id: str) -> bool:
        """True when this coordinator has loaded the group's offsets partition."""
        return self.partition_for(group_id) in self._logs

    @property
    def owned_partitions(self) -> frozenset[int]:
        return frozenset(self._logs)

    @property
    def loading_partitions(self) -> frozenset[int]:
        return frozenset(self._loading)

    async def load_partition(self, partition: int, offsets_log: OffsetsLog) -> None:
        """Replay one offsets partition (last value per key wins, tombstones delete) and
        start serving its groups. Requests for those groups get COORDINATOR_LOAD_IN_PROGRESS
        meanwhile. Loading a partition already owned does nothing."""
        if self._loop is None:
            raise RuntimeError("GroupCoordinator.start() must run before load_partition()")
        if partition in self._logs or partition in self._loading:
            return
        self._loading.add(partition)
        try:
            offsets: dict[OffsetCommitKey, OffsetAndMetadata] = {}
            groups: dict[str, GroupMetadataRecord] = {}
            open_txns = await self._replay_all(partition, offsets_log, offsets, groups)
            loaded = {gid: Group.from_record(gid, rec) for gid, rec in groups.items()}
            for k, committed in offsets.items():
                group = loaded.get(k.group)
                if group is None:  # offsets without group metadata: a "simple" group
                    group = loaded[k.group] = Group(k.group, GroupState.EMPTY, -1)
                group.offsets[(k.topic, k.partition)] = committed
            if not self._active or partition in self._logs:
                return  # shut down (or loaded twice) meanwhile
            self._logs[partition] = offsets_log
            for gid, group in loaded.items():
                if self.partition_for(gid) != partition:
                    log.warning("group %r found in %s-%d belongs to partition %d: ignored",
                                gid, "__consumer_offsets", partition, self.partition_for(gid))
                    continue
                self._groups[gid] = group
                for member in group.members.values():
                    self._schedule_heartbeat(group, member)
                if len(group.members) > self.config.group_max_size:
                    self._prepare_rebalance(group)
            for producer_id, pending in open_txns.items():
                self._pending_txn.setdefault(producer_id, {}).update(
                    ((k.group, k.topic, k.partition), v) for k, v in pending.items())
            log.info("loaded __consumer_offsets-%d: %d groups, %d offsets, %d open transactions",
                     partition, len(loaded), len(offsets), len(open_txns))
        finally:
            self._loading.discard(partition)
            self.consumer_groups.finish_load(partition, serve=self._logs.get(partition) is offsets_log)

    async def _replay_all(self, partition: int, offsets_log: OffsetsLog,
                          offsets: dict[OffsetCommitKey, OffsetAndMetadata],
                          groups: dict[str, GroupMetadataRecord]) -> dict[int, dict[OffsetCommitKey, OffsetAndMetadata]]:
        """Replays the partition into ``offsets`` and ``groups``; transactional offsets
        count once their COMMIT marker is read. Returns the offsets of transactions still
        open at the end, by producer id."""
        open_txns: dict[int, dict[OffsetCommitKey, OffsetAndMetadata]] = {}
        read_entries = getattr(offsets_log, "read_entries", None)
        if read_entries is None:
            entries: Iterable[tuple[bytes | None, bytes | None, int, int]] = (
                (k, v, -1, 0) for k, v in offsets_log.read_all())
        else:
            entries = read_entries()
        for count, (key, value, producer_id, kind) in enumerate(entries, 1):
            if count % _LOAD_YIELD_EVERY == 0:
                await asyncio.sleep(0)
            if kind == TRANSACTIONAL and key is not None:
                staged: dict[OffsetCommitKey, OffsetAndMetadata] = {}
                self._replay(partition, key, value, staged, {})
                open_txns.setdefault(producer_id, {}).update(staged)
            elif kind == COMMIT_MARKER:
                offsets.update(open_txns.pop(producer_id, {}))
            elif kind == ABORT_MARKER:
                open_txns.pop(producer_id, None)
            elif key is not None:
                self._replay(partition, key, value, offsets, groups)
        return open_txns

    def _replay(self, partition: int, key: bytes, value: bytes | None,
                offsets: dict[OffsetCommitKey, OffsetAndMetadata],
                groups: dict[str, GroupMetadataRecord]) -> None:
        if is_consumer_group_key(key):
            self.consumer_groups.replay(partition, key, value)
            return
        try:
            k = decode_key(key)
            if isinstance(k, OffsetCommitKey):
                if value is None:
                    offsets.pop(k, None)
                else:
                    offsets[k] = decode_offset_commit_value(value)
            elif isinstance(k, GroupMetadataKey):
                if value is None:
                    groups.pop(k.group, None)
                else:
                    groups[k.group] = decode_group_metadata_value(value)
        except OffsetsRecordError as exc:
            log.warning("__consumer_offsets-%d: skipping unreadable record: %s", partition, exc)

    async def unload_partition(self, partition: int) -> None:
        """Stop serving the groups of one offsets partition (leadership moved): parked
        JoinGroup/SyncGroup requests get NOT_COORDINATOR and the groups are dropped."""
        if self._logs.pop(partition, None) is None:
            return
        self.consumer_groups.unload(partition)
        # Transactional offsets of its groups: the next leader replays them from the log.
        for producer_id, pending in list(self._pending_txn.items()):
            for key in [k for k in pending if self.partition_for(k[0]) == partition]:
                del pending[key]
            if not pending:
                del self._pending_txn[producer_id]
        for group in list(self._groups.values()):
            if self.partition_for(group.group_id) == partition:
                self._drop_group(group, E.NOT_COORDINATOR)

    def _drop_group(self, group: Group, error: ErrorCode) -> None:
        for member in list(group.members.values()):
            self._complete_join(member, _join_error(member.member_id, error))
            self._complete_sync(member, _sync_result(error))
            self._cancel_heartbeat(member)
        for timer in group.pending_members.values():
            if timer is not None:
                timer.cancel()
        group.pending_members.clear()
        self._cancel_join_timer(group)
        self._cancel_sync_expiry(group)
        group.transition_to(GroupState.DEAD, self._now_ms())
        if self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]

    # == request validation ======================================================================

    def _check_group(
        self, group_id: str | None, *, allow_empty_id: bool = False
    ) -> ErrorCode | None:
        """Kafka's validateGroupStatus: a usable id, an active coordinator, a loaded partition
        owned here. OffsetCommit/OffsetFetch/DescribeGroups/DeleteGroups accept "" as id."""
        if group_id is None or (group_id == "" and not allow_empty_id):
            return E.INVALID_GROUP_ID
        if not self._active:
            return E.COORDINATOR_NOT_AVAILABLE
        partition = self.partition_for(group_id)
        if partition in self._loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self._logs:
            return E.NOT_COORDINATOR
        return None

    def _now_ms(self) -> int:
        return self._clock.time_ms()

    # == JoinGroup ==============================================================================

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes | bytearray | memoryview]],
        *,
        session_timeout_ms: int,
        rebalance_timeout_ms: int = -1,
        group_instance_id: str | None = None,
        client_id: str = "",
        client_host: str = "",
        require_known_member_id: bool = False,
        skip_assignment_supported: bool = False,
    ) -> Result:
        """JoinGroup. ``protocols`` is the request's [(name, metadata)] in preference order;
        ``rebalance_timeout_ms`` -1 (v0) means the session timeout. With
        ``require_known_member_id`` (JoinGroup v4+ as Kafka does it) a dynamic member without
        an id gets MEMBER_ID_REQUIRED and its new id, and must join again with it. With
        ``skip_assignment_supported`` (JoinGroup v9+, KIP-814) a static leader that rejoins
        a Stable group gets the members and ``skip_assignment``.

        Returns {error_code, generation_id, protocol_type, protocol_name, leader,
        skip_assignment, member_id, members: [{member_id, group_instance_id, metadata}]}
        (members only for the leader). Waits until the rebalance completes; never answers
        REBALANCE_IN_PROGRESS.
        """
        error = self._check_group(group_id)
        if error is not None:
            return _join_error(member_id, error)
        if self.consumer_groups.has_members(group_id):
            return _join_error(member_id, E.INCONSISTENT_GROUP_PROTOCOL)  # a consumer-protocol group
        cfg = self.config
        min_session, max_session = (cfg.group_min_session_timeout_ms,
                                    cfg.group_max_session_timeout_ms)
        if not min_session <= session_timeout_ms <= max_session:
            return _join_error(member_id, E.INVALID_SESSION_TIMEOUT)
        if rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        plain = [(name, bytes(metadata)) for name, metadata in protocols]
        if sum(len(m) for _, m in plain) > cfg.group_member_metadata_max_bytes:
            log.warning("group %r: JoinGroup from %r with %d bytes of protocol metadata refused",
                        group_id, client_id, sum(len(m) for _, m in plain))
            return _join_error(member_id, E.INVALID_REQUEST)

        is_unknown = member_id == ""
        group = self._groups.get(group_id)
        if group is None:
            if not is_unknown:
                return _join_error(member_id, E.UNKNOWN_MEMBER_ID)
            group = self._groups[group_id] = Group(group_id, GroupState.EMPTY, self._now_ms())

        replacing_static = (is_unknown and group_instance_id is not None
                            and group_instance_id in group.static_members)
        if not replacing_static and not self._accepts_joining_member(group, member_id):
            if group.has(member_id):
                # Over capacity (group.max.size lowered): shed a member that has not rejoined.
                self._remove_member_and_update_group(group, group.members[member_id])
            self._forget_if_unused(group)
            return _join_error("", E.GROUP_MAX_SIZE_REACHED)

        args = (rebalance_timeout_ms, session_timeout_ms, client_id, client_host,
                protocol_type, plain)
        if is_unknown:
            outcome = await self._join_unknown_member(
                group, group_instance_id, require_known_member_id, *args,
                skip_assignment_supported=skip_assignment_supported)
        else:
            outcome = self._join_known_member(group, member_id, group_instance_id, *args)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)
        if isinstance(outcome, dict):
            if outcome["error_code"] != E.NONE:
                self._forget_if_unused(group)
            return outcome
        return await outcome

    def _accepts_joining_member(self, group: Group, member_id: str) -> bool:
        """Kafka's acceptJoiningMember: new members up to group.max.size; while rebalancing
        the members that already rejoined count, so the last ones to rejoin are refused."""
        limit = self.config.group_max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None and member.is_awaiting_join:
                return True
            return group.num_awaiting_join < limit
        return group.has(member_id) or len(group.members) < limit

    def _forget_if_unused(self, group: Group) -> None:
        """Drop a group that a refused JoinGroup created and nothing else uses (it was
        never written to the log)."""
        if (group.is_(GroupState.EMPTY) and group.generation_id == 0 and not group.members
                and not group.offsets and not group.pending_members and not group.pending_commits
                and self._is_current(group)):
            del self._groups[group.group_id]

    async def _join_unknown_member(
        self, group: Group, group_instance_id: str | None, require_known_member_id: bool,
        rebalance_timeout_ms: int, session_timeout_ms: int, client_id: str, client_host: str,
        protocol_type: str, protocols: list[tuple[str, bytes]], *, skip_assignment_supported: bool = False,
    ) -> Result | asyncio.Future[Result]:
        if group.is_(GroupState.DEAD):
            return _join_error("", E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return _join_error("", E.INCONSISTENT_GROUP_PROTOCOL)
        # Kafka's GroupMetadata.generateMemberId: (group.instance.id or client.id) + "-" + UUID
        new_member_id = f"{group_instance_id or client_id}-{uuid.uuid4()}"
        if group_instance_id is not None and group_instance_id in group.static_members:
            return await self._replace_static_member(
                group, group_instance_id, new_member_id, rebalance_timeout_ms,
                session_timeout_ms, client_id, client_host, protocols, skip_assignment_supported)
        if require_known_member_id and group_instance_id is None:
            assert self._loop is not None
            group.pending_members[new_member_id] = self._clock.call_later(
                session_timeout_ms / 1000, self._on_pending_member_expired, group, new_member_id)
            return _join_error(new_member_id, E.MEMBER_ID_REQUIRED)
        return self._add_member_and_rebalance(
            group, new_member_id, group_instance_id, rebalance_timeout_ms, session_timeout_ms,
            client_id, client_host, protocol_type, protocols)

    def _join_known_member(
        self, group: Group, member_id: str, group_instance_id: str | None,
        rebalance_timeout_ms: int, session_timeout_ms: int, client_id: str, client_host: str,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> Result | asyncio.Future[Result]:
        if group.is_(GroupState.DEAD):
            return _join_error(member_id, E.COORDINATOR_NOT_AVAILABLE)
        if not group.supports_protocols(protocol_type, [name for name, _ in protocols]):
            return _join_error(member_id, E.INCONSISTENT_GROUP_PROTOCOL)
        if member_id in group.pending_members:
            timer = group.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            return self._add_member_and_rebalance(
                group, member_id, None, rebalance_timeout_ms, session_timeout_ms,
                client_id, client_host, protocol_type, protocols)
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return _join_error(member_id, error)
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms)
        if state is GroupState.COMPLETING_REBALANCE:
            if member.matches(protocols):
                # The member lost our JoinGroup response: send this generation again.
                return self._join_result(group, member)
            return self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms)
        if state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(protocols):
                # A rejoining leader asks for a new assignment (e.g. topic metadata changed).
                return self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms)
            return self._join_result(group, member, with_members=False)
        return _join_error(member_id, E.UNKNOWN_MEMBER_ID)  # Empty: stale member

    def _add_member_and_rebalance(
        self, group: Group, member_id: str, group_instance_id: str | None,
        rebalance_timeout_ms: int, session_timeout_ms: int, client_id: str, client_host: str,
        protocol_type: str, protocols: list[tuple[str, bytes]],
    ) -> asyncio.Future[Result]:
        member = Member(member_id, group_instance_id, client_id, client_host,
                        rebalance_timeout_ms, session_timeout_ms, protocol_type, protocols)
        member.is_new = True
        if group.is_(GroupState.PREPARING_REBALANCE) and group.initial_join:
            group.new_member_added = True  # extends the initial rebalance delay
        group.add(member)
        future = self._new_join_future(member)
        # A new member cannot heartbeat until it has its id; bound its wait separately.
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group)
        return future

    def _update_member_and_rebalance(
        self, group: Group, member: Member, protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int, session_timeout_ms: int,
    ) -> asyncio.Future[Result]:
        group.update_protocols(member, protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        future = self._new_join_future(member)
        self._maybe_prepare_rebalance(group)
        return future

    async def _replace_static_member(
        self, group: Group, group_instance_id: str, new_member_id: str,
        rebalance_timeout_ms: int, session_timeout_ms: int, client_id: str, client_host: str,
        protocols: list[tuple[str, bytes]], skip_assignment_supported: bool = False,
    ) -> Result | asyncio.Future[Result]:
        """A static member came back without its member id (restart): it takes over the old
        member's place under a new id, and the old id is fenced. No rebalance while the group
        is Stable and the selected protocol stays the same (KIP-345); a rejoining leader
        that can skip the assignment (JoinGroup v9+, KIP-814) gets the members with
        ``skip_assignment``, so it knows the group without assigning it."""
        old_member_id = group.static_members[group_instance_id]
        member = group.members[old_member_id]
        saved = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms,
                 member.client_id, member.client_host)
        current_leader = group.leader_id
        self._complete_join(member, _join_error(old_member_id, E.FENCED_INSTANCE_ID))
        self._complete_sync(member, _sync_result(E.FENCED_INSTANCE_ID))
        group.replace_static_member(group_instance_id, new_member_id)
        group.update_protocols(member, protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.client_id, member.client_host = client_id, client_host
        self._schedule_heartbeat(group, member)

        if group.is_(GroupState.STABLE):
            if group.candidate_protocols() and group.select_protocol() == group.protocol_name:
                error = await self._store_group_shielded(group)
                if error != E.NONE:
                    if group.static_members.get(group_instance_id) == new_member_id:
                        group.replace_static_member(group_instance_id, old_member_id)
                        group.update_protocols(member, saved[0])
                        (_, member.rebalance_timeout_ms, member.session_timeout_ms,
                         member.client_id, member.client_host) = saved
                    return _join_error(new_member_id, error)
                # The old leader id is returned on purpose: a rejoining static leader must
                # not compute an assignment that a Stable group would never distribute.
                leads = skip_assignment_supported and group.is_leader(new_member_id)
                result = self._join_result(group, member, with_members=leads)
                result["leader"] = current_leader or ""
                result["skip_assignment"] = leads
                return result
            future = self._new_join_future(member)
            self._maybe_prepare_rebalance(group)
            return future
        future = self._new_join_future(member)
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The leader may be assigning for the old member id: assign again.
            self._prepare_rebalance(group)
        return future

    def _new_join_future(self, member: Member) -> asyncio.Future[Result]:
        if member.join_future is not None and not member.join_future.done():
            return member.join_future  # a repeated JoinGroup shares the parked one's answer
        assert self._loop is not None
        member.join_future = self._loop.create_future()
        return member.join_future

    def _join_result(
        self, group: Group, member: Member, *, with_members: bool | None = None
    ) -> Result:
        if with_members is None:
            with_members = group.is_leader(member.member_id)
        members = [
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "metadata": m.metadata(group.protocol_name)}
            for m in group.members.values()
        ] if with_members else []
        return {
            "error_code": E.NONE,
            "generation_id": group.generation_id,
            "protocol_type": group.protocol_type,
            "protocol_name": group.protocol_name,
            "leader": group.leader_id or "",
            "skip_assignment": False,
            "member_id": member.member_id,
            "members": members,
        }

    @staticmethod
    def _complete_join(member: Member, result: Result) -> bool:
        future, member.join_future = member.join_future, None
        if future is None:
            return False
        if not future.done():
            future.set_result(result)
        return True

    @staticmethod
    def _complete_sync(member: Member, result: Result) -> bool:
        future, member.sync_future = member.sync_future, None
        if future is None:
            return False
        if not future.done():
            future.set_result(result)
        return True

    # == rebalance ==============================================================================

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        assert self._loop is not None
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, E.REBALANCE_IN_PROGRESS)
        self._cancel_join_timer(group)
        self._cancel_sync_expiry(group)
        if group.is_(GroupState.EMPTY):
            # Kafka's InitialDelayedJoin: wait group.initial.rebalance.delay.ms for more
            # members, again each time one arrives, within the rebalance timeout.
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            group.initial_join = True
            group.new_member_added = False
            group.join_timer = self._clock.call_later(
                delay / 1000, self._on_initial_join_delay, group, delay, remaining)
        else:
            group.initial_join = False
            group.join_timer = self._clock.call_later(
                group.rebalance_timeout_ms / 1000, self._on_join_timeout, group)
        log.info("group %r: preparing rebalance (generation %d)",
                 group.group_id, group.generation_id)
        group.transition_to(GroupState.PREPARING_REBALANCE, self._now_ms())
        self._try_complete_join(group)

    def _on_initial_join_delay(self, group: Group, delay: int, remaining: int) -> None:
        group.join_timer = None
        if not self._is_current(group) or not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining > 0:
            assert self._loop is not None
            group.new_member_added = False
            next_delay = min(delay, remaining)
            group.join_timer = self._clock.call_later(
                next_delay / 1000, self._on_initial_join_delay, group, delay,
                max(remaining - delay, 0))
            return
        self._complete_join_phase(group)

    def _on_join_timeout(self, group: Group) -> None:
        group.join_timer = None
        if self._is_current(group) and group.is_(GroupState.PREPARING_REBALANCE):
            self._complete_join_phase(group)

    def _try_complete_join(self, group: Group) -> None:
        if (group.is_(GroupState.PREPARING_REBALANCE) and not group.initial_join
                and group.has_all_members_joined()):
            self._complete_join_phase(group)

    def _complete_join_phase(self, group: Group) -> None:
        """Kafka's onCompleteJoin: drop dynamic members that did not rejoin, start the next
        generation and answer every parked JoinGroup."""
        assert self._loop is not None
        self._cancel_join_timer(group)
        group.initial_join = False
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._cancel_heartbeat(member)
                member.is_leaving = True
                group.remove(member.member_id)
        if group.is_(GroupState.DEAD):
            return
        if not group.elect_joined_leader() and group.members:
            # Only static members that have not rejoined are left: give them another round.
            group.join_timer = self._clock.call_later(
                group.rebalance_timeout_ms / 1000, self._on_join_timeout, group)
            return
        group.init_next_generation(self._now_ms())
        if group.is_(GroupState.EMPTY):
            log.info("group %r: generation %d is empty", group.group_id, group.generation_id)
            self._spawn(self._store_group(group))
            return
        log.info("group %r: generation %d with %d members, protocol %r, leader %r",
                 group.group_id, group.generation_id, len(group.members),
                 group.protocol_name, group.leader_id)
        for member in group.members.values():
            if self._complete_join(member, self._join_result(group, member)):
                self._schedule_heartbeat(group, member)
            member.is_new = False
        # Every member must now send SyncGroup within the rebalance timeout.
        group.pending_sync = set(group.members)
        group.sync_timer = self._clock.call_later(
            group.rebalance_timeout_ms / 1000, self._on_sync_expired, group, group.generation_id)

    def _sync_received(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_sync_expiry(group)

    def _cancel_sync_expiry(self, group: Group) -> None:
        group.pending_sync.clear()
        if group.sync_timer is not None:
            group.sync_timer.cancel()
            group.sync_timer = None

    def _on_sync_expired(self, group: Group, generation_id: int) -> None:
        """Kafka's DelayedSync: members that got their JoinGroup answer but never sent
        SyncGroup within the rebalance timeout are removed, and the group rebalances."""
        group.sync_timer = None
        if (not self._is_current(group) or group.generation_id != generation_id
                or group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
                or not group.pending_sync):
            return
        log.info("group %r: members %s sent no SyncGroup in time, removing them",
                 group.group_id, sorted(group.pending_sync))
        for member_id in list(group.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                member.is_leaving = True
                self._cancel_heartbeat(member)
                self._complete_sync(member, _sync_result(E.UNKNOWN_MEMBER_ID))
                group.remove(member_id)
        self._prepare_rebalance(group)

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            result = _sync_result(error, member.assignment, group)
            if self._complete_sync(member, result):
                # Sessions did not run while the SyncGroup was parked: restart them now.
                self._schedule_heartbeat(group, member)

    def _cancel_join_timer(self, group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None

    def _is_current(self, group: Group) -> bool:
        return self._groups.get(group.group_id) is group

    # == sessions ==============================================================================

    def _schedule_heartbeat(
        self, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        assert self._loop is not None
        self._cancel_heartbeat(member)
        member.last_heartbeat = self._clock.monotonic()
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        member.heartbeat_timer = self._clock.call_later(
            timeout / 1000, self._on_session_expired, group, member)

    @staticmethod
    def _cancel_heartbeat(member: Member) -> None:
        if member.heartbeat_timer is not None:
            member.heartbeat_timer.cancel()
            member.heartbeat_timer = None

    def _on_session_expired(self, group: Group, member: Member) -> None:
        member.heartbeat_timer = None
        if not self._is_current(group) or group.members.get(member.member_id) is not member:
            return
        # A member parked in JoinGroup (unless new) or SyncGroup cannot heartbeat; the end
        # of that phase restarts its session (Kafka's MemberMetadata.shouldKeepAlive).
        if (member.is_awaiting_join and not member.is_new) or member.is_awaiting_sync:
            return
        log.info("group %r: member %r session expired", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)

    def _on_pending_member_expired(self, group: Group, member_id: str) -> None:
        if member_id not in group.pending_members:
            return
        del group.pending_members[member_id]
        if self._is_current(group) and group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_member_and_update_group(self, group: Group, member: Member) -> None:
        member.is_leaving = True
        self._cancel_heartbeat(member)
        # A new member may still have its JoinGroup parked: tell it to start over.
        self._complete_join(member, _join_error("", E.UNKNOWN_MEMBER_ID))
        self._complete_sync(member, _sync_result(E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # == SyncGroup ==============================================================================

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: Iterable[tuple[str, bytes | bytearray | memoryview]] = (),
        *,
        group_instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Result:
        """SyncGroup. ``assignments`` is the leader's [(member_id, assignment)] (empty from
        followers); ``protocol_type``/``protocol_name`` are the v5+ checks (None = absent).

        Returns {error_code, protocol_type, protocol_name, assignment}. In
        CompletingRebalance the call waits for the leader's assignment."""
        error = self._check_group(group_id)
        if error is E.COORDINATOR_LOAD_IN_PROGRESS:
            # The rebalance state was lost with the old coordinator: make the member rejoin.
            return _sync_result(E.REBALANCE_IN_PROGRESS)
        if error is not None:
            return _sync_result(error)
        group = self._groups.get(group_id)
        if group is None:
            return _sync_result(E.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.DEAD):
            return _sync_result(E.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return _sync_result(error)
        if generation_id != group.generation_id:
            return _sync_result(E.ILLEGAL_GENERATION)
        if (protocol_type is not None and protocol_type != group.protocol_type) or (
            protocol_name is not None and protocol_name != group.protocol_name
        ):
            return _sync_result(E.INCONSISTENT_GROUP_PROTOCOL)
        member = group.members[member_id]
        if group.is_(GroupState.EMPTY):
            return _sync_result(E.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return _sync_result(E.REBALANCE_IN_PROGRESS)
        self._sync_received(group, member_id)
        if group.is_(GroupState.STABLE):
            self._schedule_heartbeat(group, member)
            return _sync_result(E.NONE, member.assignment, group)

        # CompletingRebalance
        plan: dict[str, bytes] = {}
        if group.is_leader(member_id):
            for target, assignment in assignments:
                if len(assignment) > self.config.group_member_metadata_max_bytes:
                    log.warning("group %r: leader %r sent a %d-byte assignment: refused",
                                group_id, member_id, len(assignment))
                    return _sync_result(E.INVALID_REQUEST)
                plan[target] = bytes(assignment)
        if member.sync_future is None or member.sync_future.done():
            assert self._loop is not None
            member.sync_future = self._loop.create_future()
        future = member.sync_future
        if group.is_leader(member_id):
            full = {mid: plan.get(mid, b"") for mid in group.members}  # missing -> empty
            self._spawn(self._store_assignment(group, group.generation_id, full))
        result: dict[str, Any] = await future
        return result

    async def _store_assignment(
        self, group: Group, generation_id: int, assignment: dict[str, bytes]
    ) -> None:
        """Persist the leader's assignment, then hand it out (runs as its own task so a
        leader that disconnects mid-write does not leave the group half-synced)."""
        error = await self._store_group(group, assignment)
        if not (self._is_current(group) and group.is_(GroupState.COMPLETING_REBALANCE)
                and group.generation_id == generation_id):
            return  # the group moved on while we were writing
        if error != E.NONE:
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group)
            return
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, E.NONE)
        group.transition_to(GroupState.STABLE, self._now_ms())

    async def _store_group(
        self, group: Group, assignment: dict[str, bytes] | None = None
    ) -> ErrorCode:
        record = group.to_record(assignment)
        key = encode_group_metadata_key(group.group_id)
        try:
            await self._append(group.group_id, [(key, encode_group_metadata_value(record))])
        except Exception as exc:  # noqa: BLE001 - every storage failure becomes an error code
            code = storage_error_code(exc, commit=False)
            log.warning("group %r: storing group metadata failed: %r -> %s",
                        group.group_id, exc, code.name)
            return code
        return E.NONE

    async def _store_group_shielded(self, group: Group) -> ErrorCode:
        return await asyncio.shield(self._spawn(self._store_group(group)))

    async def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> None:
        offsets_log = self._logs.get(self.partition_for(group_id))
        if offsets_log is None:
            raise KafkaError(E.NOT_COORDINATOR)
        await offsets_log.append(records)

    # == Heartbeat, LeaveGroup ==================================================================

    async def heartbeat(
        self, group_id: str, generation_id: int, member_id: str,
        group_instance_id: str | None = None,
    ) -> Result:
        """Heartbeat. Returns {error_code}: REBALANCE_IN_PROGRESS tells a member of the
        current generation to rejoin."""
        error = self._check_group(group_id)
        if error is E.COORDINATOR_LOAD_IN_PROGRESS:
            return {"error_code": E.NONE}  # Kafka answers blindly while loading
        if error is not None:
            return {"error_code": error}
        group = self._groups.get(group_id)
        if group is None:
            return {"error_code": E.UNKNOWN_MEMBER_ID}
        if group.is_(GroupState.DEAD):
            return {"error_code": E.COORDINATOR_NOT_AVAILABLE}
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return {"error_code": error}
        if generation_id != group.generation_id:
            return {"error_code": E.ILLEGAL_GENERATION}
        if group.is_(GroupState.EMPTY):
            return {"error_code": E.UNKNOWN_MEMBER_ID}
        # CompletingRebalance counts as alive too: clients start heartbeating as soon as
        # they have their JoinGroup answer (Kafka 2.6+ answers NONE there).
        self._schedule_heartbeat(group, group.members[member_id])
        if group.is_(GroupState.PREPARING_REBALANCE):
            return {"error_code": E.REBALANCE_IN_PROGRESS}
        return {"error_code": E.NONE}

    async def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]],
    ) -> Result:
        """LeaveGroup. ``members`` is [(member_id, group_instance_id)]: v0-v2 send one entry
        (member_id, None); v3+ a batch, where a static member may be named by instance id
        alone (member_id ""). Returns {error_code, members: [{member_id, group_instance_id,
        error_code}]}."""
        error = self._check_group(group_id)
        if error is not None:
            return {"error_code": error, "members": []}
        group = self._groups.get(group_id)
        if group is None:
            return {"error_code": E.NONE, "members": [
                {"member_id": mid, "group_instance_id": iid, "error_code": E.UNKNOWN_MEMBER_ID}
                for mid, iid in members]}
        if group.is_(GroupState.DEAD):
            return {"error_code": E.COORDINATOR_NOT_AVAILABLE, "members": []}
        results = []
        for member_id, instance_id in members:
            results.append({"member_id": member_id, "group_instance_id": instance_id,
                            "error_code": self._leave_one(group, member_id, instance_id)})
        return {"error_code": E.NONE, "members": results}

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == "":
            # Administrative removal of a static member by its instance id alone.
            current = group.static_members.get(instance_id or "")
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            member_id = current
        elif member_id in group.pending_members:
            timer = group.pending_members.pop(member_id)
            if timer is not None:
                timer.cancel()
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._try_complete_join(group)
            return E.NONE
        else:
            error = group.validate_member(member_id, instance_id)
            if error is not None:
                return error
        member = group.members[member_id]
        log.info("group %r: member %r left", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member)
        return E.NONE

    # == OffsetCommit, OffsetFetch ==============================================================

    async def offset_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        topics: Iterable[tuple[str, Iterable[Sequence[Any]]]],
        *,
        group_instance_id: str | None = None,
        retention_time_ms: int = -1,
    ) -> Result:
        """OffsetCommit. ``topics`` is [(name, [(partition_index, committed_offset,
        committed_leader_epoch, committed_metadata)])] (leader epoch -1 before v6, metadata
        may be None). A simple (non-group) commit uses generation_id -1 and member_id "".
        ``retention_time_ms`` is the v2-v4 field (-1 = broker default).

        Returns {topics: [{name, partitions: [{partition_index, error_code}]}]} in request
        order."""
        now = self._now_ms()
        expire = now + retention_time_ms if retention_time_ms >= 0 else -1
        codes: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
        valid: dict[tuple[str, int], OffsetAndMetadata] = {}
        max_bytes = self.config.offset_metadata_max_bytes
        for name, partitions in topics:
            topic_codes: list[tuple[int, ErrorCode]] = []
            codes.append((name, topic_codes))
            partitions = partitions if isinstance(partitions, list) else list(partitions)
            every_one_exists = self._every_partition_exists(name, partitions)
            for partition_index, offset, leader_epoch, metadata in partitions:
                metadata = metadata or ""
                if not (every_one_exists or self._partition_exists(name, partition_index)):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif _metadata_too_large(metadata, max_bytes):
                    code = E.OFFSET_METADATA_TOO_LARGE
                else:
                    code = E.NONE
                    valid[(name, partition_index)] = OffsetAndMetadata(
                        offset, metadata, now, leader_epoch, expire)
                topic_codes.append((partition_index, code))

        group_error = (
            self._commit_error(group_id, generation_id, member_id, group_instance_id)
            if valid else E.NONE
        )
        if group_error is None:
            group = self._groups[group_id]
            group.pending_commits.update(valid.keys())
            group_error = await asyncio.shield(self._spawn(self._store_offsets(group, valid)))
        # Every partition answered E.NONE is in ``valid``: it gets the commit's own outcome.
        return {"topics": [
            {"name": name, "partitions": [
                {"partition_index": index, "error_code": group_error if code == E.NONE else code}
                for index, code in topic_codes
            ]}
            for name, topic_codes in codes
        ]}

    def _every_partition_exists(self, topic: str, partitions: list[Sequence[Any]]) -> bool:
        """Whether every partition of one topic in a commit exists, asked with two look-ups
        whatever the number of partitions: a topic's partitions are numbered 0 to n-1, so
        all exist when the lowest is at least 0 and the highest exists. False means some
        may not: the caller then asks about each partition."""
        if not partitions:
            return True
        indexes = [partition[0] for partition in partitions]
        return min(indexes) >= 0 and self._partition_exists(topic, max(indexes))

    def _commit_error(self, group_id: str, generation_id: int, member_id: str,
                      group_instance_id: str | None) -> ErrorCode | None:
        """The error for the whole commit, or None when it may be stored."""
        error = self._check_group(group_id, allow_empty_id=True)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return E.ILLEGAL_GENERATION  # a commit from a generation we do not know
            # Offsets stored for a client that assigns partitions itself.
            self._groups[group_id] = Group(group_id, GroupState.EMPTY, self._now_ms())
            return None
        if group.is_(GroupState.DEAD):
            return E.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_(GroupState.EMPTY):
            return None
        if generation_id < 0 and member_id == "" and group_instance_id is None:
            return E.UNKNOWN_MEMBER_ID  # only members commit while the group has members
        error = group.validate_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.is_(GroupState.COMPLETING_REBALANCE):
            # The member has this generation's JoinGroup answer but not its assignment yet.
            return E.REBALANCE_IN_PROGRESS
        # Stable or PreparingRebalance: accepted, so that the commit members make before
        # rejoining is kept (the rebalance reaches them through Heartbeat).
        self._schedule_heartbeat(group, group.members[member_id])
        return None

    async def _store_offsets(
        self, group: Group, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> ErrorCode:
        """Write the commit, then make it visible; the caller has counted ``offsets`` in
        group.pending_commits."""
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(group.group_id, topic, partition),
             encode_offset_commit_value(value))
            for (topic, partition), value in offsets.items()
        ]
        try:
            await self._append(group.group_id, records)
        except Exception as exc:  # noqa: BLE001 - every storage failure becomes an error code
            code = storage_error_code(exc, commit=True)
            log.warning("group %r: storing offsets failed: %r -> %s",
                        group.group_id, exc, code.name)
            return code
        finally:
            group.pending_commits.subtract(offsets.keys())
            group.pending_commits += Counter()
        group.offsets.update(offsets)
        return E.NONE

    async def txn_offset_commit(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        topics: Iterable[tuple[str, Iterable[Sequence[Any]]]],
        *,
        generation_id: int = -1,
        member_id: str = "",
        group_instance_id: str | None = None,
    ) -> Result:
        """TxnOffsetCommit: offsets written now as the producer's transactional records,
        visible once its transaction commits (``complete_transaction``), dropped if it
        aborts. ``topics`` as for ``offset_commit``. A producer epoch older than one
        already seen gets PRODUCER_FENCED; from v3 a generation and member are checked
        like OffsetCommit's (KIP-447)."""
        now = self._now_ms()
        codes: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
        valid: dict[tuple[str, int], OffsetAndMetadata] = {}
        for name, partitions in topics:
            topic_codes: list[tuple[int, ErrorCode]] = []
            codes.append((name, topic_codes))
            for partition_index, offset, leader_epoch, metadata in partitions:
                metadata = metadata or ""
                code = E.NONE
                if not self._partition_exists(name, partition_index):
                    code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif _metadata_too_large(metadata, self.config.offset_metadata_max_bytes):
                    code = E.OFFSET_METADATA_TOO_LARGE
                else:
                    valid[(name, partition_index)] = OffsetAndMetadata(offset, metadata, now, leader_epoch, -1)
                topic_codes.append((partition_index, code))
        error = self._txn_commit_error(group_id, producer_id, producer_epoch, generation_id, member_id,
                                       group_instance_id) if valid else None
        if error is None and valid:
            error = await asyncio.shield(self._spawn(self._store_txn_offsets(group_id, producer_id, producer_epoch,
                                                                             valid)))
        return {"topics": [
            {"name": name, "partitions": [
                {"partition_index": index, "error_code": error if error is not None and code == E.NONE else code}
                for index, code in topic_codes]}
            for name, topic_codes in codes]}

    def _txn_commit_error(self, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                          member_id: str, group_instance_id: str | None) -> ErrorCode | None:
        error = self._check_group(group_id)
        if error is not None:
            return error
        if producer_epoch < self._txn_epochs.get(producer_id, -1):
            return E.PRODUCER_FENCED
        group = self._groups.get(group_id)
        if group is not None and generation_id >= 0:
            error = group.validate_member(member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        return None

    async def _store_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 offsets: dict[tuple[str, int], OffsetAndMetadata]) -> ErrorCode:
        offsets_log = self._logs.get(self.partition_for(group_id))
        append = getattr(offsets_log, "append_transactional", None)
        if append is None:
            return E.NOT_COORDINATOR if offsets_log is None else E.UNSUPPORTED_VERSION
        records: list[tuple[bytes, bytes | None]] = [
            (encode_offset_commit_key(group_id, topic, partition), encode_offset_commit_value(value))
            for (topic, partition), value in offsets.items()]
        try:
            await append(records, producer_id, producer_epoch)
        except Exception as exc:  # noqa: BLE001 - every storage failure becomes an error code
            if isinstance(exc, KafkaError) and exc.code == E.INVALID_PRODUCER_EPOCH:
                return E.PRODUCER_FENCED
            code = storage_error_code(exc, commit=True)
            log.warning("group %r: storing transactional offsets failed: %r -> %s", group_id, exc, code.name)
            return code
        self._txn_epochs[producer_id] = max(producer_epoch, self._txn_epochs.get(producer_id, -1))
        pending = self._pending_txn.setdefault(producer_id, {})
        for (topic, partition), value in offsets.items():
            pending[(group_id, topic, partition)] = value
        return E.NONE

    async def complete_transaction(self, producer_id: int, offsets_partition: int, commit: bool) -> None:
        """The producer's transaction ended on ``__consumer_offsets`` partition
        ``offsets_partition`` (its marker is written): its offsets there become the
        groups' committed offsets, or are dropped."""
        pending = self._pending_txn.get(producer_id)
        if not pending:
            return
        done = [key for key in pending if self.partition_for(key[0]) == offsets_partition]
        for key in done:
            value = pending.pop(key)
            group_id, topic, partition = key
            if not commit:
                continue
            group = self._groups.get(group_id)
            if group is None:
                group = self._groups[group_id] = Group(group_id, GroupState.EMPTY, self._now_ms())
            group.offsets[(topic, partition)] = value
        if not pending:
            del self._pending_txn[producer_id]

    def has_pending_transactional_offsets(self, group_id: str) -> bool:
        """Whether a transaction holds uncommitted offsets of the group (OffsetFetch with
        require_stable answers UNSTABLE_OFFSET_COMMIT meanwhile)."""
        return any(key[0] == group_id for pending in self._pending_txn.values() for key in pending)

    async def offset_fetch(
        self, group_id: str, topics: Iterable[tuple[str, Iterable[int]]] | None,
        *, require_stable: bool = False,
    ) -> Result:
        """OffsetFetch. ``topics`` is [(name, [partition_index])], or None (v2+) for every
        committed partition of the group. Returns {error_code, topics: [{name, partitions:
        [{partition_index, committed_offset, committed_leader_epoch, metadata,
        error_code}]}]}; a partition without a commit has offset -1. With a group-level
        error (v0-v1 have no top-level field) each requested partition carries it too."""
        error = self._check_group(group_id, allow_empty_id=True)
        group = self._groups.get(group_id) if error is None else None
        stored = group.offsets if group is not None else {}
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(stored) if error is None else ():
                by_topic.setdefault(topic, []).append(partition)
            topics = by_topic.items()
        # require_stable (KIP-447): partitions a transaction is committing offsets for
        # answer UNSTABLE_OFFSET_COMMIT until it ends; the client asks again.
        unstable = {(topic, partition) for pending in self._pending_txn.values()
                    for gid, topic, partition in pending if gid == group_id} if require_stable else set()
        out = []
        for name, partitions in topics:
            rows = []
            for index in partitions:
                value = stored.get((name, index))
                code = error if error is not None else (
                    E.UNSTABLE_OFFSET_COMMIT if (name, index) in unstable else E.NONE)
                rows.append({
                    "partition_index": index,
                    "committed_offset": value.offset if value else -1,
                    "committed_leader_epoch": value.leader_epoch if value else -1,
                    "metadata": value.metadata if value else "",
                    "error_code": code,
                })
            out.append({"name": name, "partitions": rows})
        return {"error_code": error if error is not None else E.NONE, "topics": out}

    # == ListGroups, DescribeGroups, DeleteGroups ===============================================

    async def list_groups(self, states_filter: Iterable[str] | None = None) -> Result:
        """ListGroups. ``states_filter`` (v4+) keeps groups in those states (names compared
        case-insensitively; empty/None = all). Returns {error_code, groups: [{group_id,
        protocol_type, group_state, group_type}]}."""
        if not self._active:
            return {"error_code": E.COORDINATOR_NOT_AVAILABLE, "groups": []}
        wanted = {s.lower() for s in states_filter or ()}
        groups = [
            {"group_id": g.group_id, "protocol_type": g.protocol_type or "",
             "group_state": g.state.value, "group_type": "classic"}
            for g in self._groups.values()
            if not g.is_(GroupState.DEAD) and (not wanted or g.state.value.lower() in wanted)
        ]
        error = E.COORDINATOR_LOAD_IN_PROGRESS if self._loading else E.NONE
        return {"error_code": error, "groups": groups}

    async def describe_groups(
        self, group_ids: Iterable[str], *, unknown_as_error: bool = False
    ) -> Result:
        """DescribeGroups. Returns {groups: [{error_code, error_message, group_id,
        group_state, protocol_type, protocol_data, members: [{member_id, group_instance_id,
        client_id, client_host, member_metadata, member_assignment}],
        authorized_operations}]}. An unknown group is state "Dead" with no error, or
        GROUP_ID_NOT_FOUND with ``unknown_as_error`` (what Kafka answers from v6)."""
        out = []
        for group_id in group_ids:
            entry: Result = {"error_code": E.NONE, "error_message": None, "group_id": group_id,
                             "group_state": "", "protocol_type": "", "protocol_data": "",
                             "members": [],
                             "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
            error = self._check_group(group_id, allow_empty_id=True)
            group = self._groups.get(group_id) if error is None else None
            if group is not None and group.is_(GroupState.DEAD):
                group = None
            if error is not None:
                entry["error_code"] = error
            elif group is None:
                entry["group_state"] = GroupState.DEAD.value
                if unknown_as_error:
                    entry["error_code"] = E.GROUP_ID_NOT_FOUND
                    entry["error_message"] = f"Group {group_id} not found."
            else:
                stable = group.is_(GroupState.STABLE)
                entry.update({
                    "group_state": group.state.value,
                    "protocol_type": group.protocol_type or "",
                    # Metadata and assignments are only meaningful once the group is Stable.
                    "protocol_data": (group.protocol_name or "") if stable else "",
                    "members": [
                        {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                         "member_assignment": m.assignment if stable else b""}
                        for m in group.members.values()
                    ],
                })
            out.append(entry)
        return {"groups": out}

    async def delete_groups(self, group_ids: Iterable[str]) -> Result:
        """DeleteGroups: removes empty groups and their offsets (tombstones in the log).
        Returns {results: [{group_id, error_code}]}: NON_EMPTY_GROUP while members remain,
        GROUP_ID_NOT_FOUND for unknown groups."""
        results = []
        records: dict[str, list[tuple[bytes, bytes | None]]] = {}
        for group_id in group_ids:
            error = self._check_group(group_id, allow_empty_id=True)
            group = self._groups.get(group_id) if error is None else None
            if error is None:
                if group is None or group.is_(GroupState.DEAD):
                    error = E.GROUP_ID_NOT_FOUND
                elif not group.is_(GroupState.EMPTY) or self.consumer_groups.has_members(group_id):
                    error = E.NON_EMPTY_GROUP
                else:
                    records[group_id] = self._tombstones(
                        group, list(group.offsets) + list(group.pending_commits))
                    records[group_id] += self.consumer_groups.deletion_records(group_id)
                    group.offsets.clear()
                    self._drop_group(group, E.COORDINATOR_NOT_AVAILABLE)
                    records[group_id].append((encode_group_metadata_key(group_id), None))
            results.append({"group_id": group_id,
                            "error_code": error if error is not None else E.NONE})
        for group_id, tombstones in records.items():
            try:
                await asyncio.shield(self._spawn(self._append(group_id, tombstones)))
            except Exception as exc:  # noqa: BLE001
                # Kafka removes the group from memory first too; the log catches up at the
                # next expiry or deletion.
                log.warning("group %r: writing deletion tombstones failed: %r", group_id, exc)
        return {"results": results}

    async def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> Result:
        """OffsetDelete (KIP-496): remove a group's committed offsets of ``partitions``.
        Returns {error_code, partitions: {(topic, partition): error_code}}:
        GROUP_ID_NOT_FOUND for an unknown group, NON_EMPTY_GROUP for a group with members
        whose topics cannot be read, GROUP_SUBSCRIBED_TO_TOPIC for a partition of a topic
        the group's members subscribe to (those offsets stay)."""
        error = self._check_group(group_id)
        group = self._groups.get(group_id) if error is None else None
        if error is None and (group is None or group.is_(GroupState.DEAD)):
            error = E.GROUP_ID_NOT_FOUND
        if error is not None or group is None:
            return {"error_code": error, "partitions": {}}
        in_use: set[str] = set()
        if not group.is_(GroupState.EMPTY):
            topics = group.subscribed_topics()
            if topics is None:
                return {"error_code": E.NON_EMPTY_GROUP, "partitions": {}}
            in_use = topics
        codes: dict[tuple[str, int], ErrorCode] = {}
        removed = []
        for key in partitions:
            if key[0] in in_use:
                codes[key] = E.GROUP_SUBSCRIBED_TO_TOPIC
                continue
            codes[key] = E.NONE
            if group.offsets.pop(key, None) is not None or key in group.pending_commits:
                removed.append(key)
        if removed:
            await asyncio.shield(self._spawn(self._append(group_id, self._tombstones(group, removed))))
        return {"error_code": E.NONE, "partitions": codes}

    @staticmethod
    def _tombstones(
        group: Group, keys: Iterable[tuple[str, int]]
    ) -> list[tuple[bytes, bytes | None]]:
        return [(encode_offset_commit_key(group.group_id, topic, partition), None)
                for topic, partition in dict.fromkeys(keys)]

    # == offset retention =======================================================================

    def topic_deleted(self, topic: str) -> None:
        """A store listener's entry point: the offsets go in a task of their own."""
        if self._loop is not None:
            self._spawn(self.remove_deleted_topic(topic))

    async def remove_deleted_topic(self, topic: str) -> int:
        """``topic`` was deleted: its committed offsets go from every group this
        coordinator holds (Kafka's onPartitionsDeleted), with tombstones, so a topic made
        again under the name starts from the groups' reset policy, not the old offsets.
        Returns the number of offsets removed."""
        batches: dict[int, tuple[str, list[tuple[bytes, bytes | None]]]] = {}
        removed = 0
        for group in list(self._groups.values()):
            partition = self.partition_for(group.group_id)
            keys = [key for key in group.offsets if key[0] == topic]
            if partition not in self._logs or not keys:
                continue
            for key in keys:
                del group.offsets[key]
            removed += len(keys)
            batches.setdefault(partition, (group.group_id, []))[1].extend(self._tombstones(group, keys))
        for partition, (any_group_id, records) in batches.items():
            try:
                await asyncio.shield(self._spawn(self._append(any_group_id, records)))
            except Exception as exc:  # noqa: BLE001 - the log catches up at the next deletion or expiry
                log.warning("__consumer_offsets-%d: writing tombstones of deleted topic %r failed: %r",
                            partition, topic, exc)
        return removed

    async def expire_offsets(self, now_ms: int | None = None) -> int:
        """Remove committed offsets past retention (offsets.retention.minutes) and groups left
        Empty with no offsets, writing tombstones. Returns the number of offsets removed.

        Kafka 2.1+ rules (KIP-211): a group with members keeps its offsets; an Empty consumer
        group's offsets expire retention after it became Empty; a group that only commits
        (no protocol type) expires each offset retention after its commit. An explicit
        expire timestamp (OffsetCommit v2-v4 retention_time_ms) wins where it is set.
        Not done: expiring offsets of topics an active group no longer subscribes to."""
        now = self._now_ms() if now_ms is None else now_ms
        retention = self.config.offsets_retention_ms
        removed = 0
        batches: dict[int, tuple[str, list[tuple[bytes, bytes | None]]]] = {}
        for group in list(self._groups.values()):
            partition = self.partition_for(group.group_id)
            if partition not in self._logs:
                continue
            expired = [key for key, value in group.offsets.items()
                       if key not in group.pending_commits and not self.consumer_groups.has_members(group.group_id)
                       and self._expired(group, value, now, retention)]
            records = self._tombstones(group, expired)
            for key in expired:
                del group.offsets[key]
            removed += len(expired)
            if (group.is_(GroupState.EMPTY) and not group.offsets and not group.pending_commits
                    and not group.pending_members):
                log.info("group %r: empty without offsets, removing it", group.group_id)
                self._drop_group(group, E.COORDINATOR_NOT_AVAILABLE)
                records.append((encode_group_metadata_key(group.group_id), None))
            if records:
                batches.setdefault(partition, (group.group_id, []))[1].extend(records)
        for partition, (any_group_id, records) in batches.items():
            try:
                await asyncio.shield(self._spawn(self._append(any_group_id, records)))
            except Exception as exc:  # noqa: BLE001
                log.warning("__consumer_offsets-%d: writing expiry tombstones failed: %r",
                            partition, exc)
        if removed:
            log.info("expired %d committed offsets", removed)
        return removed

    @staticmethod
    def _expired(group: Group, value: OffsetAndMetadata, now: int, retention: int) -> bool:
        if group.protocol_type is None:
            base = value.commit_timestamp
        elif group.is_(GroupState.EMPTY):
            base = group.state_timestamp if group.state_timestamp >= 0 else value.commit_timestamp
        else:
            return False
        if value.expire_timestamp >= 0:
            return now >= value.expire_timestamp
        return now - base >= retention

    async def _retention_loop(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await self._clock.sleep(interval)
            try:
                await self.expire_offsets()
            except Exception:
                log.exception("offset expiry failed")

    # == helpers ================================================================================

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run storage work as a task of its own, so a cancelled request cannot stop a write
        halfway between the log and the in-memory state."""
        assert self._loop is not None
        task = self._loop.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("group coordinator task failed", exc_info=task.exception())

    # visible for testing
    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)
