"""Replica manager: this broker's partitions as leader or follower, the in-sync replica
set, the high watermark, the acks=all purgatory, the fetch purgatories and the replica
fetchers (apache/kafka ``ReplicaManager``, ``Partition``, ``DelayedProduce``,
``DelayedFetch``, ``ReplicaFetcherThread``).

It is the one path of every record on every broker: request handlers append, read and
look up offsets through it and never ask whether a cluster runs. A standalone broker is a
cluster of one (``pykfk.cluster.embedded``): its store names it leader of every partition
with ISR = {itself}, so the high watermark follows each append at once and acks=all
never waits.

Roles come from the partition states in the metadata store (``apply_state``): a broker
leads a partition when the state names it, follows the named leader when it is one of the
replicas. A leader:

- appends producer batches stamped with its leader epoch;
- learns each follower's log end offset from the ``fetch_offset`` of its Fetch requests
  (``replica_id`` >= 0), and keeps the time it last caught up with the leader;
- computes the high watermark as the lowest log end offset over the ISR (itself
  included; a follower whose position is not known yet holds it back);
- completes acks=all produce requests once the high watermark passes their last offset,
  answering NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR then is smaller than
  ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS before the append when it already was);
- adds a follower to the ISR once it reached the high watermark and the start of the
  current leader epoch, and removes one that did not catch up within
  ``replica.lag.time.max.ms``; both changes are conditional ZooKeeper updates on the
  state version last seen, so a change by the controller in between wins and is re-read.
  The ISR used for the high watermark is the one stored, so neither change can make the
  high watermark pass data that a future leader could lack.

A follower first truncates its log: it asks the leader (OffsetForLeaderEpoch) where its
latest leader epoch ended and cuts its log there, dropping a tail the new leader never
had (KIP-101); then it fetches from its log end offset, appends the batches with their
offsets, and takes the leader's high watermark (capped at its own log end offset).
One fetcher task per source broker serves all partitions followed from it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import gc
import logging
import os
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from pykfk._core import records as core_records
from pykfk._core.append_path import LeaderState
from pykfk.clock import SYSTEM_CLOCK, Clock
from pykfk.cluster.channel import BrokerChannel, ChannelError, ChannelSecurity
from pykfk.cluster.fetch_session import FollowerFetchSession
from pykfk.cluster.leader_epoch import UNDEFINED_EPOCH, LeaderEpochCache, writes_done
from pykfk.cluster.metadata import NO_LEADER, MetadataStore, PartitionState, TopicInfo
from pykfk.cluster.throttle import UNLIMITED, ByteRateThrottle
from pykfk.cluster.waiters import AppendWaiters
from pykfk.errors import ErrorCode, KafkaError
from pykfk.log.log import LATEST_TIMESTAMP
from pykfk.log.partition_metadata import read_partition_metadata, write_partition_metadata
from pykfk.metrics.stats import BrokerTopicStats, ReplicationStats

if TYPE_CHECKING:
    from pykfk.log.log import Log

log = logging.getLogger("pykfk.cluster")

FETCH_KEY, FETCH_VERSION = 1, 11
OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION = 23, 3

LEADER, FOLLOWER, NONE = "leader", "follower", "none"


def _fail(future: asyncio.Future[None], code: ErrorCode) -> None:
    if not future.done():
        future.set_exception(KafkaError(code))


def _topic_uuid(info: TopicInfo | None) -> uuid.UUID | None:
    """The topic's id (stored as 32 hex digits), None when it has none."""
    if info is None or not info.topic_id:
        return None
    try:
        return uuid.UUID(hex=info.topic_id)
    except ValueError:
        return None


class ReplicaSettings:
    """The replication settings a ReplicaManager needs (Kafka property names in comments)."""

    def __init__(self, **kw: Any):
        self.replica_lag_time_max_ms: int = kw.get("replica_lag_time_max_ms", 30000)  # replica.lag.time.max.ms
        self.min_insync_replicas: int = kw.get("min_insync_replicas", 1)  # min.insync.replicas
        self.fetch_max_bytes: int = kw.get("fetch_max_bytes", 1048576)  # replica.fetch.max.bytes
        self.fetch_response_max_bytes: int = kw.get("fetch_response_max_bytes", 10485760)  # replica.fetch.response.max.bytes
        self.fetch_wait_max_ms: int = kw.get("fetch_wait_max_ms", 500)  # replica.fetch.wait.max.ms
        self.fetch_min_bytes: int = kw.get("fetch_min_bytes", 1)  # replica.fetch.min.bytes
        self.fetch_backoff_ms: int = kw.get("fetch_backoff_ms", 1000)  # replica.fetch.backoff.ms
        self.socket_timeout_ms: int = kw.get("socket_timeout_ms", 30000)  # replica.socket.timeout.ms
        # inter.broker.listener.name, and how to connect and log in to it.
        self.listener: str = kw.get("listener", "PLAINTEXT")
        self.channel_security: ChannelSecurity = kw.get("channel_security") or ChannelSecurity()
        # follower.replication.throttled.rate and leader.replication.throttled.rate, read
        # at each use (dynamic settings).
        self.follower_throttled_rate: Callable[[], int] = kw.get("follower_throttled_rate", lambda: UNLIMITED)
        self.leader_throttled_rate: Callable[[], int] = kw.get("leader_throttled_rate", lambda: UNLIMITED)


class RemoteReplica:
    """What a leader knows of one follower."""

    __slots__ = ("last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms", "log_end_offset")

    def __init__(self, caught_up_ms: int = 0):
        self.log_end_offset = -1  # unknown until its first fetch under this leadership
        self.last_caught_up_ms = caught_up_ms
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0


# New partitions of a topic are made in the background (see ReplicaManager.apply_topic),
# this many per worker task; also the states applied per turn of the event loop.
CREATE_CHUNK = 256


def _keep_out_of_collections() -> None:
    """Moves every object alive now out of the cyclic collector's reach (``gc.freeze``).

    A partition's replica, log and segments live as long as it does, but the collector
    walks them again at each full collection, and a full collection of a broker that
    has just made 10,000 partitions paused every client for 50-100 ms, several times
    during the creation. Young garbage is collected first so that little is kept;
    deleting partitions gives everything back to the collector (``_collect_frozen``)."""
    gc.collect(1)
    gc.freeze()


def _collect_frozen() -> None:
    """Objects frozen by ``_keep_out_of_collections`` may now be garbage (a deleted
    partition's): the next full collection looks at them again."""
    if gc.get_freeze_count():
        gc.unfreeze()


# After partitions are deleted: the delay before one full collection of what they left,
# and what stays is frozen again (a deletion of many partitions is one collection).
REFREEZE_DELAY_S = 1.0


class _PreparedReplica:
    """A new partition's log and leader epoch cache, made off the loop."""

    __slots__ = ("epochs", "log")

    def __init__(self, plog: Log, epochs: LeaderEpochCache):
        self.log = plog
        self.epochs = epochs


class Partition(LeaderState):
    """One partition replica on this broker. Loop-affine.

    Its role, leader epoch, ISR, followers and ``append_lane`` are fields of its compiled
    base (``pykfk._core.append_path.LeaderState``), which the Produce handler's compiled
    lane reads without an attribute lookup."""

    def __init__(self, manager: ReplicaManager, topic: str, partition: int, plog: Log,
                 epochs: LeaderEpochCache | None = None):
        self.manager = manager
        self.topic = topic
        self.partition = partition
        self.log = plog
        self.epochs = LeaderEpochCache(plog.dir) if epochs is None else epochs
        # The topic's metrics, held here so an append counts without a lookup.
        self.stats = manager.topic_stats.for_topic(topic)
        # What the Produce handler's compiled lane (pykfk._core.append_path) reads of a
        # leader that never changes, in one read: the log (whose LogState fields the lane
        # reads and moves), the manager, the topic and index, the topic's metrics and the
        # two purgatories an append may wake.
        self.append_lane = (plog, manager, topic, partition, self.stats,
                            manager.high_watermark_waiters, manager.log_end_waiters)
        self.replicas: tuple[int, ...] = ()
        self.state: PartitionState | None = None
        self.role = NONE
        self.leader_id = NO_LEADER
        self.leader_epoch = -1
        self.isr: frozenset[int] = frozenset()
        self.remote: dict[int, RemoteReplica] = {}
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.isr_change_pending = False
        # The log end offset when this broker became leader at its current epoch (Kafka's
        # leaderEpochStartOffsetOpt); -1 while not leader. A high watermark below it is
        # one a predecessor may have passed already (see ``check_high_watermark_known``).
        self.epoch_start_offset = -1
        # The leader state applied once the leader epoch file holds its epoch (_lead).
        self.pending_state: PartitionState | None = None
        # follower side
        self.needs_truncation = False
        self.fetch_paused_until = 0

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition}, {self.role}, epoch {self.leader_epoch})"

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.partition

    @property
    def high_watermark(self) -> int:
        return int(self.log.high_watermark)

    # -- role changes ------------------------------------------------------------------

    def become_leader(self, state: PartitionState) -> None:
        me = self.manager.broker_id
        was_leader = self.role == LEADER
        if not was_leader or state.leader_epoch != self.leader_epoch:
            self.epoch_start_offset = self.log.log_end_offset
        self.role = LEADER
        self.leader_id = me
        self.leader_epoch = state.leader_epoch
        self.isr = frozenset(state.isr)
        self.state = state
        self.needs_truncation = False
        self.epochs.assign(state.leader_epoch, self.log.log_end_offset)
        now = self.manager.now_ms()
        # Followers in the ISR get a fresh lag clock: they were in sync a moment ago.
        self.remote = {r: RemoteReplica(now if r in self.isr else 0) for r in self.replicas if r != me}
        if not self.remote:
            # No follower (replication factor 1, a cluster of one): the high watermark
            # is the log end offset, which the log then follows by itself.
            self.log.high_watermark = None
        log.log(self.manager.transition_log_level,
                "%s-%d: leader at epoch %d, ISR %s, log end offset %d, high watermark %d",
                self.topic, self.partition, state.leader_epoch, sorted(state.isr),
                self.log.log_end_offset, self.high_watermark)
        self.maybe_advance_high_watermark()
        if not was_leader:
            self.manager.leadership_changed(self, True)

    def become_follower(self, state: PartitionState) -> None:
        was_leader = self.role == LEADER
        # A follower's high watermark is the leader's (capped at its own log end), never
        # one that follows its log end offset by itself.
        self.log.high_watermark = self.log.high_watermark
        self.role = FOLLOWER
        self.epoch_start_offset = -1
        self.leader_id = state.leader
        self.leader_epoch = state.leader_epoch
        self.isr = frozenset(state.isr)
        self.state = state
        self.remote = {}
        self.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if was_leader:  # parked fetches, followers' and consumers', answer NOT_LEADER now
            self.manager.log_end_waiters.notify(self.topic, self.partition)
            self.manager.high_watermark_waiters.notify(self.topic, self.partition)
        self.needs_truncation = True
        self.fetch_paused_until = 0
        log.log(self.manager.transition_log_level,
                "%s-%d: follower of %d at epoch %d, log end offset %d, high watermark %d",
                self.topic, self.partition, state.leader, state.leader_epoch,
                self.log.log_end_offset, self.high_watermark)
        if was_leader:
            self.manager.leadership_changed(self, False)

    def stop(self) -> None:
        was_leader = self.role == LEADER
        self.role = NONE
        self.epoch_start_offset = -1
        self.fail_waiters(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if was_leader:
            self.manager.log_end_waiters.notify(self.topic, self.partition)
            self.manager.high_watermark_waiters.notify(self.topic, self.partition)
            self.manager.leadership_changed(self, False)

    # -- leader: appends and the purgatory ---------------------------------------------

    def min_insync_replicas(self) -> int:
        return self.manager.min_insync_replicas_for(self.topic)

    def append_records(
        self, records: Any, acks: int, timeout_ms: int, *, require_single_batch: bool = False,
        from_client: bool = False,
    ) -> tuple[Any, Coroutine[Any, Any, ErrorCode] | None]:
        """Append as leader (Kafka's ``appendRecords``). Returns the AppendInfo and, when
        acks=all must still wait for the ISR, a coroutine giving the final error code
        (None when the answer is known now: acks 0/1, or the high watermark already
        passed the batch, as it always does with no follower). Raises KafkaError with
        the produce error code, or a pykfk._core error for bad bytes.
        ``require_single_batch``: Produce v3+ (exactly one magic-2 batch, checked in the
        same pass that validates the bytes); ``from_client``: a producer's data, which
        the log checks by the client rules (``pykfk.log.validation``)."""
        if self.role != LEADER:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.manager.broker_id} is not the leader of {self.topic}-{self.partition}")
        manager = self.manager
        min_isr = 0
        if acks == -1:
            # Read once: the append below is synchronous, so the answer after it (when the
            # high watermark passed the batch at once) is checked against the same value.
            min_isr = manager.min_insync_replicas_for(self.topic)
            if len(self.isr) < min_isr:
                raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                 f"ISR {sorted(self.isr)} of {self.topic}-{self.partition} is smaller than "
                                 f"min.insync.replicas={min_isr}")
        plog = self.log
        info = plog.append(records, leader_epoch=self.leader_epoch, require_single_batch=require_single_batch,
                           from_client=from_client)
        stats = self.stats
        stats.bytes_in += len(records)
        # From the offsets (the record_count property costs a call); a duplicate's offsets
        # are those of the first write, an empty append's -1.
        last_offset = info.last_offset
        if last_offset >= 0 and not info.duplicate:
            stats.messages_in += last_offset - info.first_offset + 1
        if self.remote:
            self.maybe_advance_high_watermark()
        else:  # no follower: the high watermark moved with the log end offset
            manager.high_watermark_waiters.notify(self.topic, self.partition)
        manager.log_end_waiters.notify(self.topic, self.partition)
        if info.flushed is not None:  # flush.messages or flush.ms asks for an fsync first
            return info, self._after_flush(info.flushed, acks, last_offset + 1, timeout_ms)
        if acks != -1 or last_offset < 0:
            return info, None
        if plog.high_watermark > last_offset:
            if len(self.isr) < min_isr:
                code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                raise KafkaError(code, f"{self.topic}-{self.partition}: {code.name} after the append")
            return info, None
        return info, self.wait_for_replication(last_offset + 1, max(timeout_ms, 0) / 1000)

    async def _after_flush(self, flushed: concurrent.futures.Future[None], acks: int, required: int,
                           timeout_ms: int) -> ErrorCode:
        """An append whose fsync the log's flush policy asked for: answered once the
        fsync succeeded (KAFKA_STORAGE_ERROR when it failed), then as ``acks`` asks."""
        try:
            await asyncio.wrap_future(flushed)
        except KafkaError as exc:
            return exc.code
        if acks != -1:
            return ErrorCode.NONE
        return await self.wait_for_replication(required, max(timeout_ms, 0) / 1000)

    def transaction_to_verify(self, records: Any) -> tuple[int, int] | None:
        """``(producer_id, producer_epoch)`` of a transactional batch whose transaction the
        coordinator must confirm before the append (KIP-890), None when nothing needs
        asking (``Log.transaction_to_verify``)."""
        return self.log.transaction_to_verify(records)

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int, timeout_ms: int) -> tuple[Any, Coroutine[Any, Any, ErrorCode] | None]:
        """Writes a transaction marker as leader (Kafka's WriteTxnMarkers append, acks=all:
        the coordinator counts a marker written once the ISR has it). Returns what
        ``append_records`` does."""
        if self.role != LEADER:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.manager.broker_id} is not the leader of {self.topic}-{self.partition}")
        info = self.log.append_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                      leader_epoch=self.leader_epoch)
        if self.remote:
            self.maybe_advance_high_watermark()
        else:
            self.manager.high_watermark_waiters.notify(self.topic, self.partition)
        self.manager.log_end_waiters.notify(self.topic, self.partition)
        required = info.last_offset + 1
        if info.flushed is not None:  # a flush policy: the marker counts once fsynced
            return info, self._after_flush(info.flushed, -1, required, timeout_ms)
        if self.high_watermark >= required:
            return info, None
        return info, self.wait_for_replication(required, max(timeout_ms, 0) / 1000)

    def replication_error(self) -> ErrorCode:
        """acks=all once the high watermark passed the append: the ISR must still meet
        ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS_AFTER_APPEND otherwise)."""
        if len(self.isr) < self.min_insync_replicas():
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    async def wait_for_replication(self, required_offset: int, timeout_s: float) -> ErrorCode:
        """acks=all: wait until the high watermark reaches ``required_offset``."""
        if self.role != LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self.high_watermark < required_offset:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            entry = (required_offset, future)
            self.waiters.append(entry)
            timer = self.manager.clock.call_later(timeout_s, _fail, future, ErrorCode.REQUEST_TIMED_OUT)
            try:
                await future
            except KafkaError as exc:
                return exc.code
            finally:
                timer.cancel()
                with contextlib.suppress(ValueError):
                    self.waiters.remove(entry)  # still there after a timeout or a cancel
        return self.replication_error()

    def fail_waiters(self, code: ErrorCode) -> None:
        waiters, self.waiters = self.waiters, []
        for _offset, future in waiters:
            _fail(future, code)

    def maybe_advance_high_watermark(self) -> None:
        if self.role != LEADER:
            return
        me = self.manager.broker_id
        new_hw = self.log.log_end_offset
        for r in self.isr:
            if r == me:
                continue
            remote = self.remote.get(r)
            new_hw = min(new_hw, remote.log_end_offset if remote is not None else -1)
        if new_hw <= self.high_watermark:
            return
        self.log.high_watermark = new_hw
        hw = self.high_watermark
        if self.waiters:
            done = [w for w in self.waiters if w[0] <= hw]
            if done:
                self.waiters = [w for w in self.waiters if w[0] > hw]
                for _offset, future in done:
                    if not future.done():
                        future.set_result(None)
        self.manager.high_watermark_moved(self)

    # -- leader: follower fetches and the ISR ------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def check_high_watermark_known(self) -> None:
        """OFFSET_NOT_AVAILABLE while the high watermark is below the offset this
        leader's epoch started at (Kafka's ``fetchOffsetForTimestamp``). A follower learns
        the leader's high watermark one fetch late, so a new leader's may be behind the
        one (and the last stable offset) its predecessor already answered with; it
        passes the epoch start once the ISR has fetched up to there, and from then on
        it is at least any offset the old leader announced."""
        if self.epoch_start_offset > self.high_watermark:
            raise KafkaError(ErrorCode.OFFSET_NOT_AVAILABLE,
                             f"{self.topic}-{self.partition}: high watermark {self.high_watermark} is behind "
                             f"the start {self.epoch_start_offset} of leader epoch {self.leader_epoch}")

    def fetch_offset_for_timestamp(self, timestamp: int, read_committed: bool, client: bool,
                                   current_leader_epoch: int = -1) -> tuple[int, int, int]:
        """ListOffsets v1+ on the leader (Kafka's ``fetchOffsetForTimestamp``):
        ``(timestamp, offset, leader_epoch)`` for ``timestamp`` (``Log.fetch_offset_by_timestamp``),
        bounded by the last stable offset for ``read_committed``, else the high watermark.
        A client (replica id -1) asking a new leader whose high watermark has not reached
        the start of its epoch gets OFFSET_NOT_AVAILABLE for "latest" and for a lookup
        that finds nothing below the limit (see ``check_high_watermark_known``): an answer
        must never move backwards across a leader change; the client retries."""
        self.check_leader_epoch(current_leader_epoch)
        plog = self.log
        limit = plog.last_stable_offset if read_committed else plog.high_watermark
        found_timestamp, offset = plog.fetch_offset_by_timestamp(timestamp, limit)
        if client and (timestamp == LATEST_TIMESTAMP or (timestamp >= 0 and offset < 0)):
            self.check_high_watermark_known()
        return found_timestamp, offset, self.epochs.epoch_for(offset) if offset >= 0 else -1

    def legacy_offsets(self, timestamp: int, max_num_offsets: int, consumer: bool,
                       current_leader_epoch: int = -1) -> list[int]:
        """ListOffsets v0 (``Log.legacy_offsets_before``); a consumer is told the high
        watermark in place of anything past it."""
        self.check_leader_epoch(current_leader_epoch)
        offsets = self.log.legacy_offsets_before(timestamp, max_num_offsets)
        high_watermark = self.log.high_watermark
        if consumer and offsets and offsets[0] > high_watermark:
            return [high_watermark] + [o for o in offsets if o <= high_watermark]
        return offsets

    def follower_fetched(self, replica_id: int, fetch_offset: int) -> None:
        remote = self.remote.get(replica_id)
        if remote is None:
            return  # not a replica of this partition: served, not tracked
        now = self.manager.now_ms()
        leo = self.log.log_end_offset
        if fetch_offset > leo:
            return  # a divergent tail the follower still has to truncate
        if fetch_offset >= leo:
            remote.last_caught_up_ms = now
        elif fetch_offset >= remote.last_fetch_leader_leo >= 0:
            remote.last_caught_up_ms = max(remote.last_caught_up_ms, remote.last_fetch_ms)
        remote.last_fetch_leader_leo = leo
        remote.last_fetch_ms = now
        remote.log_end_offset = fetch_offset
        if replica_id not in self.isr:
            self.maybe_expand_isr(replica_id)
        self.maybe_advance_high_watermark()

    def maybe_expand_isr(self, replica_id: int) -> None:
        remote = self.remote[replica_id]
        epoch_start = self.epochs.entries[-1][1] if self.epochs.entries else 0
        if (remote.log_end_offset >= self.high_watermark and remote.log_end_offset >= epoch_start
                and self.manager.may_join_isr(replica_id)):
            self.change_isr(self.isr | {replica_id}, f"replica {replica_id} caught up")

    def shrink_isr_if_lagging(self) -> None:
        if self.role != LEADER:
            return
        now = self.manager.now_ms()
        lag = self.manager.settings.replica_lag_time_max_ms
        me = self.manager.broker_id
        out = {
            r for r in self.isr
            if r != me and now - (self.remote[r].last_caught_up_ms if r in self.remote else 0) > lag
        }
        if out:
            self.change_isr(self.isr - out, f"replicas {sorted(out)} lag more than {lag} ms")

    def change_isr(self, isr: frozenset[int], reason: str) -> None:
        if self.isr_change_pending or self.state is None or isr == self.isr:
            return
        self.isr_change_pending = True
        self.manager.spawn(self._write_isr(isr, self.state, reason))

    async def _write_isr(self, isr: frozenset[int], based_on: PartitionState, reason: str) -> None:
        from kazoo.exceptions import BadVersionError

        store = self.manager.store
        new = PartitionState(self.manager.broker_id, based_on.leader_epoch, tuple(sorted(isr)),
                             based_on.controller_epoch)
        try:
            await store.update_isr(self.topic, self.partition, new, based_on.version)
            log.info("%s-%d: ISR %s -> %s (%s)", self.topic, self.partition, sorted(based_on.isr),
                     sorted(isr), reason)
        except BadVersionError:
            log.info("%s-%d: ISR change to %s lost a race; re-reading the state", self.topic,
                     self.partition, sorted(isr))
            with contextlib.suppress(Exception):
                await store.read_state(self.topic, self.partition)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: retried on the next check
            log.warning("%s-%d: ISR change to %s failed: %r", self.topic, self.partition, sorted(isr), exc)
        finally:
            self.isr_change_pending = False

    def track_replicas(self) -> None:
        """A leader's followers: the assignment's replicas (a reassignment adds and
        removes some) and any ISR member (a replica being removed stays until the
        controller takes it out of the ISR)."""
        me = self.manager.broker_id
        wanted = (set(self.replicas) | self.isr) - {me}
        if wanted == self.remote.keys():
            return
        had_followers = bool(self.remote)
        for r in wanted - self.remote.keys():
            self.remote[r] = RemoteReplica()
        for r in self.remote.keys() - wanted:
            del self.remote[r]
        if self.remote and not had_followers:
            # The high watermark followed the log end by itself; from now on it is
            # computed over the ISR (pinned where it is).
            self.log.high_watermark = self.log.high_watermark
        elif had_followers and not self.remote:
            self.maybe_advance_high_watermark()
            self.log.high_watermark = None

    def apply_isr(self, state: PartitionState) -> None:
        """Same leader and epoch, new ISR (written by this leader or the controller)."""
        self.state = state
        isr, was = frozenset(state.isr), self.isr
        self.isr = isr
        if self.role == LEADER:  # the ISR metrics of the partitions this broker leads
            counts = self.manager.replication_stats
            if isr < was:
                counts.isr_shrinks += 1
            elif isr > was:
                counts.isr_expands += 1
        for r in self.isr:
            if r not in self.remote and r != self.manager.broker_id:
                self.remote[r] = RemoteReplica(self.manager.now_ms())
        self.maybe_advance_high_watermark()

    # -- follower: truncation ----------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        offset = max(0, min(offset, self.log.log_end_offset))
        if offset < self.log.log_end_offset:
            log.info("%s-%d: truncating from %d to %d", self.topic, self.partition, self.log.log_end_offset, offset)
            self.log.truncate_to(offset)
        self.epochs.truncate_from_end(self.log.log_end_offset)

    def append_as_follower(self, records: memoryview, leader_hw: int) -> int:
        """Append fetched batches (whole ones, at or past the log end offset); returns
        the number of bytes appended."""
        count, complete = core_records.scan_batches(records)
        if count == 0:
            self._take_high_watermark(leader_hw)
            return 0
        buf = records[:complete]
        # Skip batches below the log end offset (a fetch that started inside a batch).
        leo = self.log.log_end_offset
        pos = 0
        while pos + core_records.BATCH_HEADER_SIZE <= len(buf):
            header = core_records.parse_batch_header(buf, pos)
            if header.last_offset >= leo:
                break
            pos += header.size
        buf = buf[pos:]
        if len(buf) == 0:
            self._take_high_watermark(leader_hw)
            return 0
        info = self.log.append(buf, assign_offsets=False)
        self.stats.replication_bytes_in += len(buf)
        for header in info.headers:
            epoch = header.partition_leader_epoch
            if epoch > self.epochs.latest_epoch:
                self.epochs.assign(epoch, header.base_offset)
        self._take_high_watermark(leader_hw)
        return len(buf)

    def _take_high_watermark(self, leader_hw: int) -> None:
        if leader_hw >= 0:
            hw = min(leader_hw, self.log.log_end_offset)
            if hw != self.log.high_watermark:
                self.log.high_watermark = hw


class ReplicaManager:
    """All partition replicas of this broker. Loop-affine.

    ``store`` is the metadata store (embedded or ZooKeeper), ``log_manager`` creates and
    deletes logs (set before ``start``), ``log_config_for(topic)`` gives a topic's
    LogConfig.
    """

    def __init__(
        self,
        broker_id: int,
        store: MetadataStore,
        log_manager: Any,
        settings: ReplicaSettings,
        *,
        log_config_for: Callable[[str], Any],
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.broker_id = broker_id
        self.clock = clock
        self.store = store
        self.log_manager = log_manager
        self.settings = settings
        self.log_config_for = log_config_for
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Broker metrics (pykfk.metrics): records and bytes per topic, ISR changes.
        self.topic_stats = BrokerTopicStats()
        self.replication_stats = ReplicationStats()
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # Reassignment throttles: fetches for the replicas this broker is adding (all
        # leaders together), and what this broker as leader sends to replicas being added.
        self.follower_throttle = ByteRateThrottle(settings.follower_throttled_rate, clock)
        self.leader_throttle = ByteRateThrottle(settings.leader_throttled_rate, clock)
        self.leadership_listeners: list[Callable[[str, int, bool], None]] = []
        # Fetch purgatories. Follower fetches park in ``log_end_waiters``, woken by leader
        # appends; consumer fetches in ``high_watermark_waiters``, woken when the high
        # watermark moves (so they never see records the ISR lacks).
        self.log_end_waiters = AppendWaiters()
        self.high_watermark_waiters = AppendWaiters()
        self.shutting_down = False
        # Level of the one line a partition's change of role logs (lower in a bulk creation).
        self.transition_log_level = logging.INFO
        self._refreeze: asyncio.TimerHandle | None = None  # see remove_partition
        self._tasks: set[asyncio.Task[Any]] = set()
        self._isr_task: asyncio.Task[None] | None = None
        # Topics whose new partitions are being created in the background (see apply_topic)
        # and the logs made for them off the loop, not yet taken by a Partition.
        self._creating: dict[str, asyncio.Task[None]] = {}
        self._prepared: dict[tuple[str, int], _PreparedReplica] = {}
        # Replicas whose log dir is offline (KAFKA_STORAGE_ERROR until it comes back),
        # and replicas whose log could not be made (tried again at their next state).
        self.offline_partitions: dict[tuple[str, int], str] = {}
        self._creation_failed: dict[tuple[str, int], str] = {}

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        if self.log_manager is not None and self._on_log_dir_change not in self.log_manager.dir_listeners:
            self.log_manager.dir_listeners.append(self._on_log_dir_change)
        interval = max(self.settings.replica_lag_time_max_ms / 2, 50) / 1000
        self._isr_task = asyncio.get_running_loop().create_task(self._isr_checks(interval))

    async def _isr_checks(self, interval_s: float) -> None:
        while True:
            await self.clock.sleep(interval_s)
            # Only a leader with other replicas in its ISR or assigned can shrink it:
            # passing over the rest keeps this cheap on a broker of many partitions.
            for partition in [p for p in self.partitions.values() if p.remote or len(p.isr) > 1]:
                try:
                    partition.shrink_isr_if_lagging()
                except Exception:
                    log.exception("ISR check of %s failed", partition)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop_fetchers(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        for fetcher in fetchers:
            await fetcher.stop()

    async def shutdown(self) -> None:
        self.shutting_down = True
        if self._refreeze is not None:
            self._refreeze.cancel()
            self._refreeze = None
        if self._isr_task is not None:
            self._isr_task.cancel()
            await asyncio.gather(self._isr_task, return_exceptions=True)
        await self.stop_fetchers()
        for partition in self.partitions.values():
            partition.stop()
        self.wake_fetches()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)

    # -- state from ZooKeeper ----------------------------------------------------------

    def apply_state(self, topic: str, partition: int) -> None:
        """The state, assignment or existence of a partition changed in the store."""
        if self.shutting_down or self.log_manager is None:
            return
        info = self.store.get_topic(topic)
        state = self.store.partition_state(topic, partition)
        key = (topic, partition)
        replicas = info.replicas(partition, self.broker_id) if info is not None and partition < info.partitions else ()
        current = self.partitions.get(key)
        if self.broker_id not in replicas:
            self._creation_failed.pop(key, None)
            if self.offline_partitions.pop(key, None) is not None:
                with contextlib.suppress(OSError):  # its dir may still be failing
                    self.log_manager.delete_log(topic, partition)
            elif current is not None:
                # The topic is gone, or a reassignment moved the partition off this
                # broker (the controller took it out of the ISR first): drop the data.
                self.remove_partition(topic, partition, delete=True)
            return
        if key in self.offline_partitions:
            return  # taken up again when its log dir comes back
        if state is None:
            return
        if state.leader == self.broker_id and 0 <= state.zxid < self.store.registration_zxid:
            # Written before this broker's current registration (it restarted, or its
            # session expired): the controller re-elects, and only that state counts.
            log.debug("%s-%d: waiting for a state newer than this registration", topic, partition)
            return
        if current is None:
            try:
                current = self._create_partition(topic, partition)
            except KafkaError as exc:
                problem = exc.message or exc.code.name
                if key not in self._creation_failed:
                    log.warning("%s-%d: no log could be made for this broker's replica: %s", topic, partition,
                                problem)
                self._creation_failed[key] = problem
                return
            self._creation_failed.pop(key, None)
        current.replicas = tuple(replicas)
        applied = current.pending_state or current.state
        if applied is not None and (state.leader_epoch < applied.leader_epoch
                                    or state.controller_epoch < applied.controller_epoch):
            log.debug("%s-%d: ignoring stale state %s (have %s)", topic, partition, state, applied)
            return
        current.pending_state = None  # a leadership waiting for its epoch file: superseded
        if state.leader == self.broker_id:
            if current.role == LEADER and state.leader_epoch == current.leader_epoch:
                current.apply_isr(state)
                current.track_replicas()
            else:
                self._unfollow(current)
                self._lead(current, state)
        elif current.role == FOLLOWER and state.leader_epoch == current.leader_epoch and state.leader == current.leader_id:
            current.state = state
            current.isr = frozenset(state.isr)
        else:
            self._unfollow(current)
            current.become_follower(state)
            if state.leader != NO_LEADER:
                self._fetcher_for(state.leader).add(current)

    def _lead(self, current: Partition, state: PartitionState) -> None:
        """``become_leader`` once the leader epoch file holds the new epoch: written and
        synced by the epoch writer thread, not on the loop (1-300 ms on a busy disk).
        Meanwhile the partition is not this broker's to lead yet (Produce and Fetch get
        NOT_LEADER_OR_FOLLOWER, as while the controller's decision is on its way); a
        newer state of the partition applied before the write is done supersedes it."""
        written = current.epochs.assign_in_worker(state.leader_epoch, current.log.log_end_offset)
        if written is None:
            self._become_leader(current, state)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test driving the manager directly): wait here
            written.result()
            self._become_leader(current, state)
            return
        if current.role != NONE:
            current.stop()
        current.pending_state = state

        def done(_written: concurrent.futures.Future[None]) -> None:
            if current.pending_state is not state or self.partitions.get(current.key) is not current:
                return
            current.pending_state = None
            if self.shutting_down:
                return
            error = written.exception()
            if isinstance(error, OSError):
                self._epoch_write_failed(current, error)
            elif error is not None:
                log.error("%s-%d: writing the leader epoch file failed", current.topic, current.partition,
                          exc_info=error)
            else:
                self._become_leader(current, state)

        def wake(_written: concurrent.futures.Future[None]) -> None:  # in the writer thread
            with contextlib.suppress(RuntimeError):  # the loop is closed: the broker stopped
                loop.call_soon_threadsafe(done, _written)

        written.add_done_callback(wake)

    async def leaders_settled(self) -> None:
        """Returns once the leaderships applied so far whose epoch files were being
        written are taken up (or failed)."""
        await writes_done()

    def _become_leader(self, current: Partition, state: PartitionState) -> None:
        try:
            current.become_leader(state)
        except OSError as exc:
            self._epoch_write_failed(current, exc)

    def _epoch_write_failed(self, current: Partition, exc: OSError) -> None:
        # Its leader epoch file could not be written: a restart would then answer
        # OffsetForLeaderEpoch from a stale one, so the dir goes offline (Kafka's way
        # with any I/O error of a log dir).
        self.log_manager.report_dir_error(os.path.dirname(current.log.dir), exc, offline=True)

    def _create_partition(self, topic: str, partition: int) -> Partition:
        prepared = self._prepared.pop((topic, partition), None)
        topic_id = _topic_uuid(self.store.get_topic(topic))
        plog = self.log_manager.get_log(topic, partition)
        if plog is not None and prepared is None and topic_id is not None:
            plog = self._checked_topic_id(plog, topic, partition, topic_id)
        if plog is None:
            plog = self.log_manager.create_log(topic, partition, self.log_config_for(topic))
            if topic_id is not None:
                try:
                    write_partition_metadata(plog.dir, topic_id)
                except OSError as exc:
                    self.log_manager.report_dir_error(os.path.dirname(plog.dir), exc)
                    with contextlib.suppress(OSError):
                        self.log_manager.delete_log(topic, partition)
                    raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                                     f"writing the partition.metadata of {topic}-{partition} failed: {exc}") from None
            plog.high_watermark = 0
        elif prepared is not None and prepared.log is plog:
            plog.high_watermark = 0
        else:
            prepared = None
            checkpoint = self.log_manager.high_watermark_checkpoint(topic, partition)
            plog.high_watermark = checkpoint if checkpoint is not None else 0
        created = Partition(self, topic, partition, plog, prepared.epochs if prepared else None)
        self.partitions[(topic, partition)] = created
        return created

    def _checked_topic_id(self, plog: Log, topic: str, partition: int, topic_id: uuid.UUID) -> Log | None:
        """An existing log of the partition, if its partition.metadata names this topic
        (written now when missing); None after deleting a log left from a deleted topic
        of the same name, whose records must not pass as this topic's (KIP-516)."""
        stored = read_partition_metadata(plog.dir)
        if stored is None:
            try:
                write_partition_metadata(plog.dir, topic_id)
            except OSError as exc:  # written at the next start instead
                self.log_manager.report_dir_error(os.path.dirname(plog.dir), exc)
            return plog
        if stored == topic_id:
            return plog
        log.warning("%s-%d: the log in %s belongs to an older topic of this name (topic id %s, now %s): "
                    "deleting it", topic, partition, plog.dir, stored, topic_id)
        self.log_manager.delete_log(topic, partition)
        return None

    def _refreeze_later(self) -> None:
        if self._refreeze is not None:
            return
        try:
            self._refreeze = asyncio.get_running_loop().call_later(REFREEZE_DELAY_S, self._collect_and_freeze)
        except RuntimeError:  # no loop (a stopped broker): nothing to keep out of collections
            pass

    def _collect_and_freeze(self) -> None:
        self._refreeze = None
        if not self.shutting_down:
            gc.collect()
            gc.freeze()

    def _unfollow(self, partition: Partition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(partition)

    def remove_partition(self, topic: str, partition: int, *, delete: bool) -> None:
        current = self.partitions.pop((topic, partition), None)
        if current is not None:
            self._unfollow(current)
            current.stop()
        if delete:
            _collect_frozen()
            self._refreeze_later()
            self.log_manager.delete_log(topic, partition)
            self.high_watermark_waiters.notify(topic, partition)

    def _on_log_dir_change(self, log_dir: str, state: str, partitions: list[tuple[str, int]]) -> None:
        """The log manager took ``log_dir`` offline (its replicas here stop, answer
        KAFKA_STORAGE_ERROR and give up their leadership) or brought it back (they take
        their roles from the store again, their logs loaded anew)."""
        if self.shutting_down:
            return
        if state != "offline":
            for key in partitions:
                offline = self.offline_partitions.pop(key, None)
                if offline is not None or self._creation_failed.pop(key, None) is not None:
                    self.apply_state(*key)
            return
        reason = f"log dir {log_dir} is offline"
        for key in partitions:
            self.offline_partitions[key] = reason
            current = self.partitions.get(key)
            if current is None:
                continue
            led = current.state if current.role == LEADER else None
            current.fail_waiters(ErrorCode.KAFKA_STORAGE_ERROR)
            self.remove_partition(*key, delete=False)
            if led is not None and len(led.isr) > 1:
                self.spawn(self._leave_isr(key, led))

    async def _leave_isr(self, key: tuple[str, int], led: PartitionState) -> None:
        """A leader whose log dir failed writes itself out of the ISR; the controller
        then elects another ISR member (a leader outside its ISR is one it replaces)."""
        isr = tuple(r for r in led.isr if r != self.broker_id)
        for _attempt in range(5):
            state = self.store.partition_state(*key)
            if state is None or state.leader != self.broker_id or self.broker_id not in state.isr:
                return
            try:
                await self.store.update_isr(key[0], key[1], dataclasses.replace(state, isr=isr), state.version)
                log.info("%s-%d: left the ISR (its log dir is offline)", *key)
                return
            except Exception as exc:  # noqa: BLE001 - a conflict (the state moved) or ZooKeeper away: again
                log.debug("%s-%d: leaving the ISR: %s", key[0], key[1], exc)
                await self.clock.sleep(0.2)

    def _fetcher_for(self, leader_id: int) -> ReplicaFetcher:
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
            fetcher.start()
        return fetcher

    def leadership_changed(self, partition: Partition, leader: bool) -> None:
        for listener in list(self.leadership_listeners):
            try:
                listener(partition.topic, partition.partition, leader)
            except Exception:
                log.exception("leadership listener failed for %s", partition)

    def now_ms(self) -> int:
        """Monotonic milliseconds: follower lag and fetch back-off."""
        return int(self.clock.monotonic() * 1000)

    def high_watermark_moved(self, partition: Partition) -> None:
        self.high_watermark_waiters.notify(partition.topic, partition.partition)

    def fetch_waiters(self, replica_id: int) -> AppendWaiters:
        """Where a parked Fetch waits: a follower (``replica_id`` >= 0) for the leader's
        log to grow, a consumer for the high watermark to move. Both are made with the
        manager and never replaced (the compiled Fetch handler asks once per manager)."""
        return self.log_end_waiters if replica_id >= 0 else self.high_watermark_waiters

    def wake_fetches(self) -> None:
        """Shutdown: every parked fetch answers now with what it has."""
        self.log_end_waiters.wake_all()
        self.high_watermark_waiters.wake_all()

    def being_added(self, partition: Partition, broker_id: int | None = None) -> bool:
        """A replica (this broker's by default) being added in a reassignment and not in
        sync yet: the replicas the reassignment throttles hold back."""
        replica = self.broker_id if broker_id is None else broker_id
        info = self.store.get_topic(partition.topic)
        return (info is not None and replica in info.adding_replicas.get(partition.partition, ())
                and replica not in partition.isr)

    def may_join_isr(self, broker_id: int) -> bool:
        return (broker_id in self.store.live_broker_ids()
                and broker_id not in self.store.shutdown_requests())

    def min_insync_replicas_for(self, topic: str) -> int:
        info = self.store.get_topic(topic)
        value = info.configs.get("min.insync.replicas") if info is not None else None
        if value is not None:
            try:
                return int(value)
            except ValueError:
                pass
        return self.settings.min_insync_replicas

    # -- services for request handlers -------------------------------------------------

    def get_partition(self, topic: str, partition: int) -> Partition:
        found = self.partitions.get((topic, partition))
        if found is not None:
            return found
        info = self.store.get_topic(topic)
        if info is None or not 0 <= partition < info.partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} does not exist")
        problem = self.offline_partitions.get((topic, partition)) or self._creation_failed.get((topic, partition))
        if problem is not None:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"{topic}-{partition} on broker {self.broker_id}: {problem}")
        raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {self.broker_id} has no replica of {topic}-{partition}")

    def leader_partition(self, topic: str, partition: int) -> Partition:
        found = self.partitions.get((topic, partition))
        if found is not None and found.role == LEADER:
            return found  # the common case first: one lookup per produced partition
        found = self.get_partition(topic, partition)
        if found.role != LEADER:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"broker {self.broker_id} is not the leader of {topic}-{partition}")
        return found

    def leader_log(self, topic: str, partition: int) -> Log:
        """The log of a partition this broker leads; KafkaError otherwise."""
        return self.leader_partition(topic, partition).log

    def log_for_fetch(self, topic: str, partition: int, replica_id: int, fetch_offset: int,
                      current_leader_epoch: int, *, report_position: bool = True,
                      consumer_on_follower: bool = False) -> tuple[Log, int]:
        """(log, read limit) for a Fetch: consumers read up to the high watermark,
        followers up to the log end offset; a follower's ``fetch_offset`` is its position
        (once per request: ``report_position`` is False when a parked fetch reads again).
        With ``consumer_on_follower`` (Fetch v11+, KIP-392) a consumer may read a
        follower's copy too, up to the follower's high watermark.

        The compiled Fetch handler (``pykfk._core.fetch_path``) reads the common case's
        limits from the partition's and the log's fields itself (a leader at the named
        epoch, no transaction in flight, no throttle): whatever else this decides it
        leaves to this method."""
        found = self.partitions.get((topic, partition))
        if found is None or found.role != LEADER:
            if consumer_on_follower and replica_id < 0 and found is not None and found.role == FOLLOWER:
                found.check_leader_epoch(current_leader_epoch)
                return found.log, found.log.high_watermark
            found = self.leader_partition(topic, partition)  # raises the right error
        if current_leader_epoch >= 0 and current_leader_epoch != found.leader_epoch:
            found.check_leader_epoch(current_leader_epoch)
        plog = found.log
        if replica_id >= 0:
            if report_position:
                found.follower_fetched(replica_id, fetch_offset)
            if self.leader_throttle.limited and self.being_added(found, replica_id):
                return plog, self._throttled_read_limit(plog, fetch_offset)
            return plog, plog.log_end_offset
        return plog, plog.high_watermark

    def _throttled_read_limit(self, plog: Log, fetch_offset: int) -> int:
        """leader.replication.throttled.rate for a replica being added: nothing while the
        rate is used up, else the whole batches of about one second's worth, counted
        now (the fetch then sends at most those)."""
        throttle = self.leader_throttle
        if fetch_offset >= plog.log_end_offset or throttle.exceeded():
            return fetch_offset
        try:
            region = plog.read(fetch_offset, min(throttle.rate, self.settings.fetch_max_bytes)).file_region
        except KafkaError:
            return plog.log_end_offset  # out of range: the fetch answers that itself
        if region is None:
            return plog.log_end_offset
        data = region.read()
        _count, complete = core_records.scan_batches(data)
        position, limit = 0, fetch_offset
        while position < complete:
            header = core_records.parse_batch_header(data, position)
            position, limit = position + header.size, header.last_offset + 1
        throttle.record(complete)
        return max(limit, fetch_offset)

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int, current_leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch on the leader: (epoch, end offset)."""
        found = self.leader_partition(topic, partition)
        found.check_leader_epoch(current_leader_epoch)
        return found.epochs.end_offset_for(epoch, found.log.log_end_offset)

    def append_records(
        self, topic: str, partition: int, records: Any, acks: int, timeout_ms: int
    ) -> tuple[Any, Coroutine[Any, Any, ErrorCode] | None]:
        """``Partition.append_records`` on the leader of (topic, partition)."""
        return self.leader_partition(topic, partition).append_records(records, acks, timeout_ms)

    async def append(self, topic: str, partition: int, records: Any, acks: int, timeout_ms: int) -> Any:
        """``append_records`` that waits: returns the AppendInfo once acks are met;
        raises KafkaError with the produce error code."""
        info, pending = self.append_records(topic, partition, records, acks, timeout_ms)
        if pending is not None:
            code = await pending
            if code != ErrorCode.NONE:
                raise KafkaError(code, f"{topic}-{partition}: {code.name} after the append")
        return info

    def led_partitions(self) -> Iterator[Partition]:
        return (p for p in self.partitions.values() if p.role == LEADER)

    def apply_topic(self, topic: str, partitions: Iterable[int]) -> None:
        """A topic was created, grew, changed its configs or went away.

        New partitions are created in the background: their files off the event loop
        (a new log's first segment and its leader epoch file took 5-100 ms of the loop
        each on a busy disk), their states applied CREATE_CHUNK at a time, so other
        clients are answered meanwhile; ``created(topic)`` waits for that."""
        info = self.store.get_topic(topic)
        if info is not None:
            config = self.log_config_for(topic)
            for (t, _p), replica in self.partitions.items():
                if t == topic and replica.log.config != config:
                    replica.log.update_config(config)
        partitions = list(partitions)
        new = [p for p in partitions if self._needs_new_log(info, p)] if info is not None else []
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a test driving the manager directly)
            loop = None
        if not new or topic in self._creating or self.log_manager is None or loop is None:
            for partition in partitions:
                self.apply_state(topic, partition)
            return
        task = loop.create_task(self._create_in_background(topic, partitions, new))
        self._creating[topic] = task
        task.add_done_callback(lambda _t: self._creating.pop(topic, None))

    async def created(self, topic: str) -> None:
        """Returns once the background creation of ``topic``'s partitions (if any) is done."""
        task = self._creating.get(topic)
        if task is not None:
            await asyncio.shield(task)
        failed = sorted(p for (t, p) in self._creation_failed if t == topic)
        if failed:
            raise KafkaError(ErrorCode.KAFKA_STORAGE_ERROR,
                             f"broker {self.broker_id} could not make the logs of {len(failed)} partitions of "
                             f"{topic} ({failed[:10]}): {self._creation_failed[(topic, failed[0])]}")

    def _needs_new_log(self, info: TopicInfo, partition: int) -> bool:
        """A partition of this broker's with no log yet."""
        return (self._is_mine(info, partition)
                and (info.name, partition) not in self.partitions
                and self.log_manager is not None
                and self.log_manager.get_log(info.name, partition) is None)

    def _is_mine(self, info: TopicInfo | None, partition: int) -> bool:
        return (info is not None and 0 <= partition < info.partitions
                and self.broker_id in info.replicas(partition, self.broker_id))

    async def _create_in_background(self, topic: str, partitions: list[int], new: list[int]) -> None:
        """Creates the logs (and leader epoch files) of ``new`` in a worker thread,
        CREATE_CHUNK at a time, and applies each chunk's states on the loop while the
        worker makes the next one; then the states of the other partitions."""
        me = self.broker_id
        leads = {p: state.leader_epoch for p in new
                 if (state := self.store.partition_state(topic, p)) is not None and state.leader == me}
        config = self.log_config_for(topic)
        loop = asyncio.get_running_loop()
        topic_id = _topic_uuid(self.store.get_topic(topic))  # the one the new logs are made for
        made: list[Log] = []
        chunks = [new[start:start + CREATE_CHUNK] for start in range(0, len(new), CREATE_CHUNK)]
        new_set = set(new)
        others = [p for p in partitions if p not in new_set]

        def make(index: int) -> asyncio.Future[tuple[dict[tuple[str, int], _PreparedReplica], dict[int, str]]] | None:
            if index >= len(chunks):
                return None
            return loop.run_in_executor(None, self._prepare_replicas, topic, chunks[index], leads, config)

        making = make(0)
        try:
            for index, chunk in enumerate(chunks):
                if making is None:
                    break
                current, making = making, None
                prepared, failed = await current
                # A topic deleted meanwhile: what was made is dropped below.
                making = make(index + 1) if self.store.get_topic(topic) is not None else None
                self._prepared.update(prepared)
                made.extend(replica.log for replica in prepared.values())
                # A log that could not be made fails the creation (``created``) rather than
                # being tried again here, where its dir, gone offline, is no longer chosen.
                for partition, problem in failed.items():
                    log.warning("%s-%d: no log could be made for this broker's replica: %s", topic, partition, problem)
                    self._creation_failed[(topic, partition)] = problem
                self._apply_quietly(topic, [p for p in chunk if p not in failed])
                _keep_out_of_collections()
                await asyncio.sleep(0)
            for start in range(0, len(others), CREATE_CHUNK):
                self._apply_quietly(topic, others[start:start + CREATE_CHUNK])
                await asyncio.sleep(0)
            led = sum(1 for p in partitions if (r := self.partitions.get((topic, p))) is not None and r.role == LEADER)
            log.info("%s: %d new partitions, this broker leading %d of them", topic, len(new), led)
            if topic_id is not None:
                self.spawn(self._write_topic_ids(topic_id, made))
        finally:
            if making is not None:  # the chunk being made when this stopped: its logs are dropped below
                with contextlib.suppress(Exception):
                    self._prepared.update((await asyncio.shield(making))[0])
            self._drop_unused_prepared(topic)

    def _apply_quietly(self, topic: str, partitions: list[int]) -> None:
        """apply_state for each, their changes of role logged at DEBUG: one line for the
        topic instead (10,000 lines on the loop were a fifth of its time in a creation)."""
        self.transition_log_level = logging.DEBUG
        try:
            for partition in partitions:
                self.apply_state(topic, partition)
        finally:
            self.transition_log_level = logging.INFO

    def _prepare_replicas(self, topic: str, partitions: list[int], leads: dict[int, int],
                          config: Any) -> tuple[dict[tuple[str, int], _PreparedReplica], dict[int, str]]:
        """Worker thread: a new log per partition, and the leader epoch it will start at
        when this broker leads it (written unsynced, as Kafka does for epoch changes)."""
        prepared = {}
        failed: dict[int, str] = {}
        for partition in partitions:
            try:
                plog = self.log_manager.create_log(topic, partition, config)
            except KafkaError as exc:
                failed[partition] = exc.message or exc.code.name
                continue
            epochs = LeaderEpochCache(plog.dir, sync=False, entries=[])
            if partition in leads:
                epochs.assign(leads[partition], 0)
            epochs.sync = True  # later leadership changes are written as usual
            prepared[(topic, partition)] = _PreparedReplica(plog, epochs)
        return prepared, failed

    async def _write_topic_ids(self, topic_id: uuid.UUID, logs: list[Log]) -> None:
        """The partition.metadata files of a bulk creation, written once it is done, as
        Kafka flushes them from its scheduler: they were a quarter of each partition's
        file work. A log deleted or replaced meanwhile is passed over (its directory may
        hold another topic's log by then); one left without the file when the broker
        stops gets it at the next start (``_checked_topic_id``)."""
        def write_all() -> None:
            for plog in logs:
                if self.shutting_down:
                    return
                self.log_manager.in_current_log_dir(plog, lambda path: write_partition_metadata(path, topic_id))

        await asyncio.get_running_loop().run_in_executor(None, write_all)

    def _drop_unused_prepared(self, topic: str) -> None:
        """Deletes the logs made for partitions that are no longer this broker's (the
        topic was deleted meanwhile). Those whose state has not arrived yet (a ZooKeeper
        cluster writes states after the topic) wait for it in ``_prepared``."""
        info = self.store.get_topic(topic)
        for key in [k for k in self._prepared if k[0] == topic]:
            if self._is_mine(info, key[1]):
                continue
            self._prepared.pop(key)
            if key not in self.partitions:
                self.log_manager.delete_log(*key)


class ReplicaFetcher:
    """Fetches every partition this broker follows from one leader broker."""

    def __init__(self, manager: ReplicaManager, leader_id: int):
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._channel: BrokerChannel | None = None
        self._stopped = False
        self.session = FollowerFetchSession()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"pykfk-replica-fetcher-{self.leader_id}")

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._channel is not None:
            self._channel.close()

    def add(self, partition: Partition) -> None:
        self.partitions[partition.key] = partition
        self._wake.set()

    def remove(self, partition: Partition) -> None:
        if self.partitions.get(partition.key) is partition:
            del self.partitions[partition.key]

    def _current(self, partition: Partition, epoch: int) -> bool:
        return (self.partitions.get(partition.key) is partition and partition.role == FOLLOWER
                and partition.leader_epoch == epoch and partition.leader_id == self.leader_id)

    async def _run(self) -> None:
        backoff = self.manager.settings.fetch_backoff_ms / 1000
        while not self._stopped:
            if not self.partitions:
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                channel = self._connect()
                await self._truncate(channel)
                fetched = await self._fetch(channel)
                if not fetched:
                    await self.manager.clock.sleep(min(backoff, 0.1))
            except asyncio.CancelledError:
                raise
            except (ChannelError, KafkaError) as exc:
                self.session.reset()
                log.info("fetcher for leader %d: %s; retrying in %.1f s", self.leader_id, exc, backoff)
                await self.manager.clock.sleep(backoff)
            except Exception:
                log.exception("fetcher for leader %d failed; retrying", self.leader_id)
                await self.manager.clock.sleep(backoff)

    def _connect(self) -> BrokerChannel:
        broker = self.manager.store.get_broker(self.leader_id)
        if broker is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"broker {self.leader_id} is not registered")
        settings = self.manager.settings
        address = broker.address(settings.listener)
        if address is None:
            raise KafkaError(ErrorCode.LISTENER_NOT_FOUND,
                             f"broker {self.leader_id} has no listener {settings.listener}")
        channel = self._channel
        if channel is None or (channel.host, channel.port) != address:
            if channel is not None:
                channel.close()
            channel = self._channel = BrokerChannel(
                address[0], address[1], client_id=f"pykfk-replica-{self.manager.broker_id}",
                timeout_s=settings.socket_timeout_ms / 1000, security=settings.channel_security)
        return channel

    async def _truncate(self, channel: BrokerChannel) -> None:
        """OffsetForLeaderEpoch for the partitions that just started following."""
        pending = [p for p in self.partitions.values() if p.needs_truncation]
        if not pending:
            return
        asked: list[tuple[Partition, int, int]] = []
        topics: dict[str, list[dict[str, int]]] = {}
        for p in pending:
            epoch = p.epochs.latest_epoch
            if epoch == UNDEFINED_EPOCH:
                p.truncate_to(p.high_watermark)  # no epochs known: Kafka's fallback
                p.needs_truncation = False
                continue
            asked.append((p, p.leader_epoch, epoch))
            topics.setdefault(p.topic, []).append(
                {"partition": p.partition, "current_leader_epoch": p.leader_epoch, "leader_epoch": epoch})
        if not asked:
            return
        body = {"replica_id": self.manager.broker_id,
                "topics": [{"topic": t, "partitions": parts} for t, parts in topics.items()]}
        response = await channel.request(OFFSET_FOR_LEADER_EPOCH_KEY, OFFSET_FOR_LEADER_EPOCH_VERSION, body)
        results = {(t.topic, r.partition): r for t in response.topics for r in t.partitions}
        for p, leader_epoch, asked_epoch in asked:
            result = results.get(p.key)
            if result is None or not self._current(p, leader_epoch):
                continue
            if result.error_code != ErrorCode.NONE:
                log.info("%s-%d: OffsetForLeaderEpoch answered %s", p.topic, p.partition,
                         ErrorCode(result.error_code).name)
                continue
            if result.leader_epoch == UNDEFINED_EPOCH or result.end_offset < 0:
                target = p.high_watermark
            else:
                target = result.end_offset
                if result.leader_epoch < asked_epoch:
                    # The leader never had our latest epoch: cut where our copy of its
                    # epoch ended too.
                    target = min(target, p.epochs.end_offset_for(result.leader_epoch, p.log.log_end_offset)[1])
            p.truncate_to(target)
            p.needs_truncation = False

    async def _fetch(self, channel: BrokerChannel) -> bool:
        settings = self.manager.settings
        now = self.manager.now_ms()
        throttle = self.manager.follower_throttle
        sent: list[tuple[Partition, int, bool]] = []
        wanted: dict[tuple[str, int], dict[str, int]] = {}
        for p in self.partitions.values():
            if p.needs_truncation or p.fetch_paused_until > now:
                continue
            throttled = throttle.limited and self.manager.being_added(p)
            if throttled and throttle.exceeded():
                continue  # a replica being added waits for the reassignment throttle
            sent.append((p, p.leader_epoch, throttled))
            wanted[p.key] = {
                "current_leader_epoch": p.leader_epoch,
                "fetch_offset": p.log.log_end_offset,
                "log_start_offset": p.log.log_start_offset,
                # About one second's worth at a time, so the rate stays even.
                "partition_max_bytes": min(settings.fetch_max_bytes, throttle.rate) if throttled
                else settings.fetch_max_bytes,
            }
        if not sent:
            return False
        body = {
            "replica_id": self.manager.broker_id,
            "max_wait_ms": settings.fetch_wait_max_ms,
            "min_bytes": settings.fetch_min_bytes,
            "max_bytes": settings.fetch_response_max_bytes,
            "isolation_level": 0,
            # An incremental session (KIP-227): only changed partitions go out.
            **self.session.request_fields(wanted),
            "rack_id": "",
        }
        timeout = settings.fetch_wait_max_ms / 1000 + settings.socket_timeout_ms / 1000
        response = await channel.request(FETCH_KEY, FETCH_VERSION, body, timeout_s=timeout)
        self.session.answered(response.error_code, response.session_id)
        if response.error_code:
            raise KafkaError(ErrorCode(response.error_code), "fetch refused")
        results = {(t.topic, r.partition_index): r for t in response.responses for r in t.partitions}
        for p, epoch, throttled in sent:
            result = results.get(p.key)
            if result is None or not self._current(p, epoch):
                continue
            try:
                appended = self._handle_partition(p, result)
                if throttled:
                    throttle.record(appended)
            except KafkaError as exc:
                log.warning("%s-%d: cannot append fetched data: %s", p.topic, p.partition, exc)
                p.needs_truncation = True
                p.fetch_paused_until = self.manager.now_ms() + settings.fetch_backoff_ms
        return True

    def _handle_partition(self, p: Partition, result: Any) -> int:
        """Takes one partition's part of a fetch response; returns the bytes appended."""
        code = result.error_code
        appended = 0
        if code == ErrorCode.NONE:
            records = result.records
            if records is not None and len(records):
                appended = p.append_as_follower(memoryview(records), result.high_watermark)
            else:
                p._take_high_watermark(result.high_watermark)
            # Records deleted on the leader (DeleteRecords) go here too, up to what this
            # replica knows to be committed.
            leader_start = min(result.log_start_offset, p.log.high_watermark)
            if leader_start > p.log.log_start_offset:
                p.log.advance_log_start_offset(leader_start)
        elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
            leader_start = result.log_start_offset
            if leader_start >= 0 and p.log.log_end_offset < leader_start:
                log.info("%s-%d: log end offset %d is below the leader's log start %d: restarting the log there",
                         p.topic, p.partition, p.log.log_end_offset, leader_start)
                p.log.truncate_fully_and_start_at(leader_start)
                p.epochs.clear_and_start_at(leader_start)
            else:
                p.needs_truncation = True
        else:
            # NOT_LEADER_OR_FOLLOWER, FENCED/UNKNOWN_LEADER_EPOCH...: the new state is on
            # its way through ZooKeeper; ask again a little later.
            p.fetch_paused_until = self.manager.now_ms() + min(self.manager.settings.fetch_backoff_ms, 200)
        return appended
